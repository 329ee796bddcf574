/**
 * A real agent makes itself non-dumpable before it runs anything, so a step under the agent's own
 * uid cannot read the agent's memory (where its token and session proof live) or its environment,
 * even on a host with no security module guarding /proc. With `KICI_AGENT_SEAL=off` the same step
 * reads both, which shows the check can fail.
 */
import { spawn } from 'node:child_process';
import { chown, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { onPath } from '../../src/scaler/backends/bare-metal/host-probe.js';
import {
  AGENT_BIN,
  NODE,
  alive,
  eventually,
  startTestOrchestrator,
  type TestOrchestrator,
} from '../helpers/orchestrator.js';
import { MEMORY_SCAN } from '../helpers/takeover.js';

/** Root reads any process's memory anyway, so a root test runs its agents as this uid. */
const AGENT_UID = 60_992;

let t: TestOrchestrator | undefined;
const kids: { pid?: number | undefined; kill(sig?: NodeJS.Signals): boolean }[] = [];
const dirs: string[] = [];
afterEach(async () => {
  for (const c of kids.splice(0)) if (c.pid && alive(c.pid)) c.kill('SIGKILL');
  await t?.stop();
  t = undefined;
  for (const d of dirs.splice(0)) await rm(d, { recursive: true, force: true });
});

/** What the step reports: the agent's environment and memory, each as read or as refused. */
const STEP = [
  'env_hits=$(tr "\\0" "\\n" < /proc/$PPID/environ 2>/dev/null | grep -c "^KICI_AGENT_ID=" || true)',
  'echo "environ: ${env_hits:-0}"',
  'set -- $(AGENT_PID=$PPID "$SCAN_NODE" -e "$MEMORY_SCAN_SRC" 2>/dev/null)',
  'got() { if [ "$1" = none ]; then echo no; else echo yes; fi; }',
  'echo "memory: token=$(got "$1") proof=$(got "$2")"',
].join('\n');

/**
 * What a root agent keeps in a container or a VM guest: everything but the capabilities that read
 * another process's memory, which its steps (root too) therefore lack as well.
 */
const ROOT_BOUNDING = '-sys_ptrace,-sys_admin,-perfmon,-bpf,-sys_rawio,-sys_module';

async function startAgent(
  id: string,
  labels: string,
  token: string,
  extra: Record<string, string>,
  asRoot = false,
) {
  const home = await mkdtemp(join(tmpdir(), 'kici-seal-'));
  dirs.push(home);
  const env: Record<string, string> = {
    PATH: process.env.PATH ?? '/usr/bin:/bin',
    HOME: home,
    TMPDIR: home,
    KICI_ORCHESTRATOR_URL: t!.orch.wsUrl,
    KICI_AGENT_ID: id,
    KICI_LABELS: labels,
    // In the initial environment on purpose: sealing must hide it there too.
    KICI_AGENT_TOKEN: token,
    ...extra,
  };
  let file = NODE;
  let args = [AGENT_BIN];
  if (asRoot) {
    file = onPath('setpriv', process.env.PATH) ?? 'setpriv';
    args = [`--bounding-set=${ROOT_BOUNDING}`, '--', NODE, AGENT_BIN];
  } else if (process.getuid?.() === 0) {
    await chown(home, AGENT_UID, AGENT_UID);
    file = onPath('setpriv', process.env.PATH) ?? 'setpriv';
    args = [`--reuid=${AGENT_UID}`, `--regid=${AGENT_UID}`, '--clear-groups', '--', NODE, AGENT_BIN];
  }
  const child = spawn(file, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
  kids.push(child);
  let out = '';
  child.stdout.on('data', (d) => (out += String(d)));
  child.stderr.on('data', (d) => (out += String(d)));
  await eventually(() => t!.orch.dispatcher.registry.get(id), 15_000, `agent ${id} to register`);
  return { output: () => out };
}

async function runStep(labels: string): Promise<string[]> {
  const run = await t!.api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
    jobs: {
      probe: {
        runsOn: [labels],
        env: { SCAN_NODE: NODE, MEMORY_SCAN_SRC: MEMORY_SCAN },
        steps: [{ run: STEP }],
      },
    },
  });
  const job = await t!.waitForJob(run.body.jobs[0]!.id, undefined, 30_000);
  expect(job.state).toBe('succeeded');
  const logs = await t!.api<{ lines: { line: string }[] }>('GET', `/api/v1/jobs/${job.id}/logs`);
  return logs.body.lines.map((l) => l.line);
}

describe.runIf(process.platform === 'linux')('an agent runs non-dumpable', () => {
  it('its step cannot read its memory or environment; with KICI_AGENT_SEAL=off it can', async () => {
    t = await startTestOrchestrator();
    const mint = async (agentId: string, label: string) =>
      (await t!.api<{ token: string }>('POST', '/api/v1/agents/tokens', { agentId, labels: [label] })).body
        .token;
    const sealed = await startAgent(
      'sealed-agent',
      'pool-sealed',
      await mint('sealed-agent', 'pool-sealed'),
      {},
    );
    const open = await startAgent('open-agent', 'pool-open', await mint('open-agent', 'pool-open'), {
      KICI_AGENT_SEAL: 'off',
    });

    const sealedLines = await runStep('pool-sealed');
    expect(sealedLines).toContain('environ: 0');
    expect(sealedLines).toContain('memory: token=no proof=no');
    expect(sealed.output()).not.toContain('agent memory is readable');

    const openLines = await runStep('pool-open');
    expect(openLines).toContain('environ: 1');
    expect(openLines).toContain('memory: token=yes proof=yes');
    expect(open.output()).not.toContain('agent memory is readable');
  });

  it.runIf(process.getuid?.() === 0)(
    'a root agent seals by a gid switch: its root step without CAP_SYS_PTRACE reads nothing; with KICI_AGENT_SEAL=off it can',
    async () => {
      t = await startTestOrchestrator();
      const mint = async (agentId: string, label: string) =>
        (await t!.api<{ token: string }>('POST', '/api/v1/agents/tokens', { agentId, labels: [label] })).body
          .token;
      const sealed = await startAgent(
        'root-sealed',
        'pool-root-sealed',
        await mint('root-sealed', 'pool-root-sealed'),
        {},
        true,
      );
      const open = await startAgent(
        'root-open',
        'pool-root-open',
        await mint('root-open', 'pool-root-open'),
        { KICI_AGENT_SEAL: 'off' },
        true,
      );

      const sealedLines = await runStep('pool-root-sealed');
      expect(sealedLines).toContain('environ: 0');
      expect(sealedLines).toContain('memory: token=no proof=no');
      expect(sealed.output()).not.toContain('agent memory is readable');

      const openLines = await runStep('pool-root-open');
      expect(openLines).toContain('environ: 1');
      expect(openLines).toContain('memory: token=yes proof=yes');
      expect(open.output()).not.toContain('agent memory is readable');
    },
  );
});
