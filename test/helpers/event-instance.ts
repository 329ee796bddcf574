import { mkdir, mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { AGENT_BIN, NODE } from './orchestrator.js';
import { MARKER } from './leftover-processes.js';

/**
 * A stand-in "cloud" for event-scaler tests: a provisioning job template whose step runs a small
 * script. On scale-up it boots an "instance" — a detached kici-agent in its own process group,
 * configured only from the payload at KICI_EVENT_PATH. On scale-down it kills that group by the
 * pid it recorded, and notes the reason. `mode: http` redeems the claim over HTTP itself and hands
 * the agent a token (and keeps the token in a file, so a test can look for it elsewhere). Each claim
 * code received is noted in claim-codes.log in the state dir, for the same reason.
 */
const SCRIPT = `
import { spawn } from 'node:child_process';
import { appendFileSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
const [stateDir, mode, managed] = process.argv.slice(2);
const name = process.env.KICI_EVENT_NAME;
const p = JSON.parse(readFileSync(process.env.KICI_EVENT_PATH, 'utf8'));
const pidFile = stateDir + '/' + p.agentId + '.pid';
appendFileSync(stateDir + '/events.log', JSON.stringify({ name, agentId: p.agentId, reason: p.reason ?? null, keys: Object.keys(p).sort() }) + '\\n');
if (name === 'kici.scaler.scale-up') {
  // The test's own record of the code, so it can look for the code everywhere else.
  appendFileSync(stateDir + '/claim-codes.log', p.claimCode + '\\n');
  const env = { PATH: process.env.PATH, HOME: process.env.HOME, KICI_AGENT_ID: p.agentId,
    KICI_LABELS: p.labels.join(','), KICI_ORCHESTRATOR_URL: p.orchestratorUrl };
  if (managed !== 'unmanaged') env.KICI_SCALER_MANAGED = '1';
  if (process.env.${MARKER}) env.${MARKER} = process.env.${MARKER};
  if (mode === 'http') {
    const base = p.orchestratorUrl.replace(/^ws/, 'http').replace(/\\/ws$/, '');
    const res = await fetch(base + '/scaler/claim', { method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ claimCode: p.claimCode, agentId: p.agentId }) });
    if (!res.ok) { console.error('claim refused: ' + res.status); process.exit(1); }
    const creds = await res.json();
    writeFileSync(stateDir + '/' + p.agentId + '.token', creds.agentToken, { mode: 0o600 });
    env.KICI_AGENT_TOKEN = creds.agentToken;
  } else env.KICI_SCALER_CLAIM_CODE = p.claimCode;
  const out = openSync(stateDir + '/' + p.agentId + '.log', 'a');
  const child = spawn(${JSON.stringify(NODE)}, [${JSON.stringify(AGENT_BIN)}], { detached: true, stdio: ['ignore', out, out], env });
  writeFileSync(pidFile, String(child.pid));
  child.unref();
  console.log('booted instance ' + p.agentId);
} else {
  let pid = 0;
  try { pid = Number(readFileSync(pidFile, 'utf8')); } catch {}
  if (pid > 0) { try { process.kill(-pid, 'SIGKILL'); } catch {} rmSync(pidFile, { force: true }); }
  console.log('stopped instance ' + p.agentId + ' (' + p.reason + ')');
}
`;

export interface EventCloud {
  dir: string;
  stateDir: string;
  configPath: string;
}

export async function makeEventCloud(opts: {
  mode?: 'ws' | 'http';
  maxAgents?: number;
  targets?: string[];
  extraScalers?: unknown[];
  /** Where the provisioning template asks to run (default: the bare-metal provisioner). */
  templateRunsOn?: string[];
  /** false: boot instances without KICI_SCALER_MANAGED, as a careless provisioner would. */
  scalerManagedEnv?: boolean;
  /** A first step prints the payload (claim code and all) to the job log, as a careless template would. */
  printPayload?: boolean;
}): Promise<EventCloud> {
  const dir = await mkdtemp(join(tmpdir(), 'kici-event-'));
  const stateDir = join(dir, 'state');
  await mkdir(stateDir);
  await writeFile(join(dir, 'instance.mjs'), SCRIPT);
  const template = {
    name: 'cloud-provisioner',
    jobs: {
      provision: {
        runsOn: opts.templateRunsOn ?? ['provisioner'],
        steps: [
          ...(opts.printPayload ? [{ name: 'show the payload', run: 'cat "$KICI_EVENT_PATH"; echo' }] : []),
          {
            run: `${NODE} ${join(dir, 'instance.mjs')} ${stateDir} ${opts.mode ?? 'ws'} ${opts.scalerManagedEnv === false ? 'unmanaged' : 'managed'}`,
          },
        ],
      },
    },
  };
  await writeFile(join(dir, 'provision.yaml'), stringify(template));
  const config = {
    version: 1,
    globalMaxAgents: 10,
    scalers: [
      {
        name: 'prov',
        type: 'bare-metal',
        maxAgents: 3,
        labelSets: [{ labels: ['provisioner'], binaryPath: AGENT_BIN, trust: 'host' }],
      },
      {
        name: 'cloud',
        type: 'event',
        maxAgents: opts.maxAgents ?? 2,
        labelSets: [{ labels: ['cloud'] }],
        provisioningTargets: opts.targets ?? ['job:provision.yaml'],
      },
      ...(opts.extraScalers ?? []),
    ],
  };
  const configPath = join(dir, 'scalers.yaml');
  await writeFile(configPath, stringify(config));
  return { dir, stateDir, configPath };
}
