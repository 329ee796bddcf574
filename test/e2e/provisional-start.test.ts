/**
 * A cold bare-metal agent is started while its spawn record is being written (the record's write
 * is off the way from a submit to the agent's start), and a crash or a failed write in that window
 * leaves nothing behind. A real orchestrator in a process of its own, confined agents (their own
 * uid and home), and a fault placed in the test's own child: the record's write never ends, or
 * fails once. Root only (agents run under uids of their own).
 */
import { randomUUID } from 'node:crypto';
import { mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { afterEach, describe, expect, it } from 'vitest';
import { listAgentProcesses } from '../../src/scaler/backends/bare-metal/orphans.js';
import { defaultHomesRoot } from '../../src/scaler/backends/bare-metal/users.js';
import { killPids, tail } from '../helpers/crash.js';
import { freshDataDir } from '../helpers/data-dir.js';
import { AGENT_BIN, alive, eventually, ROOT, runNode } from '../helpers/orchestrator.js';

type Child = ReturnType<typeof runNode>;
const children: Child[] = [];
const dirs: string[] = [];
let scaler = '';

afterEach(async () => {
  // Stopped as an operator would (SIGTERM): its stop tears its agents down, homes and uids too.
  for (const c of children.splice(0)) {
    if (c.child.exitCode === null && c.child.signalCode === null) c.child.kill('SIGTERM');
    await c.exited;
  }
  // Backstop: whatever agent of this test's scaler still runs, by pid.
  if (scaler) killPids((await listAgentProcesses(scaler)).map((p) => p.pid));
  for (const d of dirs.splice(0)) await rm(d, { recursive: true, force: true });
});

/**
 * An orchestrator in its own process. `fault`: `hold`, the first spawn record's write never ends
 * (as if the process died while writing it); `fail-once`, the first one fails once its agent
 * process exists. The child names the agent the fault hit on its stdout.
 */
async function orchestrator(dir: string, dataDir: string, fault?: 'hold' | 'fail-once') {
  const script = join(dir, 'orchestrator.mjs');
  await writeFile(
    script,
    `import { Orchestrator } from ${JSON.stringify(join(ROOT, 'dist/server/orchestrator.js'))};
import { SpawnsRepo } from ${JSON.stringify(join(ROOT, 'dist/store/spawns-repo.js'))};
import { listAgentProcesses } from ${JSON.stringify(join(ROOT, 'dist/scaler/backends/bare-metal/orphans.js'))};
const fault = process.env.FAULT;
const write = SpawnsRepo.prototype.insertSpawnAndToken;
let hit = false;
SpawnsRepo.prototype.insertSpawnAndToken = async function (record, ...rest) {
  if (!fault || hit) return write.call(this, record, ...rest);
  hit = true;
  // The agent's process exists before its record does: the start did not wait for the write.
  while (!(await listAgentProcesses(process.env.SCALER)).some((p) => p.agentId === record.agentId))
    await new Promise((r) => setImmediate(r));
  console.log(JSON.stringify({ faultFor: record.agentId }));
  if (fault === 'hold') return new Promise(() => {});
  throw new Error('the disk refused the write');
};
const orch = await Orchestrator.start(JSON.parse(process.env.ORCH_OPTS));
console.log(JSON.stringify({ ready: orch.url, token: orch.adminToken }));
process.on('SIGTERM', () => void orch.stop().then(() => process.exit(0)));
`,
  );
  const child = runNode([script], {
    ORCH_OPTS: JSON.stringify({ port: 0, dataDir, scalerConfigPath: join(dir, 'scalers.yaml') }),
    FAULT: fault ?? '',
    SCALER: scaler,
    KICI_LOG_LEVEL: 'info',
  });
  children.push(child);
  const m = await eventually(
    () => {
      if (child.child.exitCode !== null)
        throw new Error(`orchestrator exited:\n${tail(child.output().stderr)}`);
      return /"ready":"(http:[^"]+)","token":"([^"]+)"/.exec(child.output().stdout);
    },
    120_000,
    'the orchestrator to be ready',
  );
  const [url, token] = [m[1]!, m[2]!];
  const api = async (method: string, path: string, body?: unknown) => {
    const res = await fetch(`${url}${path}`, {
      method,
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      ...(body ? { body: JSON.stringify(body) } : {}),
    });
    return (await res.json()) as Record<string, unknown>;
  };
  const faultFor = () =>
    eventually(
      () => /"faultFor":"([^"]+)"/.exec(child.output().stdout)?.[1],
      60_000,
      'the fault to hit a started agent',
    );
  return { ...child, api, faultFor };
}

async function setUp(): Promise<{ dir: string; dataDir: string }> {
  scaler = `prov-${randomUUID().slice(0, 6)}`;
  const dir = await mkdtemp(join(tmpdir(), 'kici-prov-'));
  const dataDir = await freshDataDir();
  dirs.push(dir, dataDir);
  await writeFile(
    join(dir, 'scalers.yaml'),
    stringify({
      version: 1,
      scalers: [
        {
          name: scaler,
          type: 'bare-metal',
          maxAgents: 1,
          // Confined as the default is: its own uid and home, which a crash must not leave.
          labelSets: [{ labels: [scaler], binaryPath: AGENT_BIN, runAsUser: 'dynamic' }],
        },
      ],
    }),
  );
  return { dir, dataDir };
}

/** What of the agent is on the host: its process, its home, the uid claims naming it. */
async function leftOf(agentId: string): Promise<{ process: boolean; home: boolean; claims: string[] }> {
  const root = defaultHomesRoot();
  const claims: string[] = [];
  for (const uid of await readdir(join(root, '.uids')).catch(() => [] as string[])) {
    const owner = await readFile(join(root, '.uids', uid, 'agent'), 'utf8').catch(() => '');
    if (owner === agentId) claims.push(uid);
  }
  return {
    process: (await listAgentProcesses(scaler)).some((p) => p.agentId === agentId),
    home: await stat(join(root, agentId)).then(
      () => true,
      () => false,
    ),
    claims,
  };
}

/**
 * Neither the agent's process, nor its home, nor a uid claim naming it, is left on the host. Its
 * home and claim go after the process has exited, so the three are awaited together.
 */
async function nothingLeftOf(agentId: string): Promise<void> {
  const none = { process: false, home: false, claims: [] };
  let last = await leftOf(agentId);
  await eventually(
    async () => JSON.stringify((last = await leftOf(agentId))) === JSON.stringify(none),
    30_000,
    `nothing of agent ${agentId} to be left`,
  ).catch(() => undefined);
  expect(last).toEqual(none);
}

type Api = (method: string, path: string, body?: unknown) => Promise<Record<string, unknown>>;

/** One job on this test's scaler, which no agent serves until one is started for it; its id. */
async function submitCold(api: Api): Promise<string> {
  const run = await api('POST', '/api/v1/runs', {
    jobs: { cold: { runsOn: [scaler], steps: [{ run: 'echo ran' }] } },
  });
  return (run.jobs as { id: string }[])[0]!.id;
}

async function jobState(api: Api, id: string) {
  return (await api('GET', `/api/v1/jobs/${id}`)).state as string;
}

describe.runIf(process.platform === 'linux' && process.getuid?.() === 0)(
  'a cold agent started while its spawn record is written',
  () => {
    it('an orchestrator killed before the record exists leaves no agent, home or uid claim; the job runs after the restart', async () => {
      const { dir, dataDir } = await setUp();
      const first = await orchestrator(dir, dataDir, 'hold');
      const jobId = await submitCold(first.api);
      const agentId = await first.faultFor();
      // The agent is started but not registered: its registration waits for the record.
      const pid = first.child.pid!;
      process.kill(pid, 'SIGKILL');
      await first.exited;
      expect(alive(pid)).toBe(false);
      // The spawner saw its orchestrator go with the start unsettled: the agent, its home and uid go.
      await nothingLeftOf(agentId);
      const second = await orchestrator(dir, dataDir);
      await eventually(
        async () => (await jobState(second.api, jobId)) === 'succeeded',
        120_000,
        `job ${jobId} to succeed after the restart`,
      );
    });

    it('a record that cannot be written stops its agent and leaves nothing; the job runs on the next start', async () => {
      const { dir, dataDir } = await setUp();
      const orch = await orchestrator(dir, dataDir, 'fail-once');
      const jobId = await submitCold(orch.api);
      const agentId = await orch.faultFor();
      await nothingLeftOf(agentId);
      await eventually(
        async () => (await jobState(orch.api, jobId)) === 'succeeded',
        120_000,
        `job ${jobId} to succeed on a later start`,
      );
      expect(orch.output().stdout).toContain('could not record a spawn; stopping its start');
    });
  },
);
