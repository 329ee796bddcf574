/**
 * Where one cold bare-metal start spends its time: each hop's median, in ms after the submit left
 * the client, over N starts (confined by default, `--host` for trust: host). The hops are read by
 * wrapping the built classes' methods in this process, so the orchestrator runs unchanged.
 * `--agent` adds the agent's own hops (agent-marks.mjs, preloaded through the label set's env), and
 * times N starts of the floor by hand (the same confined launch from a small process, as the
 * cold-start bench does) with the same marks, in ms after its spawn: one after each of ours, since
 * the host's speed drifts within a minute (run after all of ours, the hand-made boots had read
 * 2.5-4 ms faster than ours; interleaved, the two are the same).
 *   node bench/cold-start-trace.ts [N] [--host] [--agent]
 */
import { chmod, copyFile, mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pino } from 'pino';
import { Orchestrator } from '../dist/server/orchestrator.js';
import { Dispatcher } from '../dist/dispatch/dispatcher.js';
import { SpawnsRepo } from '../dist/store/spawns-repo.js';
import { SessionsRepo } from '../dist/store/sessions-repo.js';
import { BareMetalScalerBackend } from '../dist/scaler/backends/bare-metal/backend.js';
import { AgentUserPool } from '../dist/scaler/backends/bare-metal/users.js';
import { SealedRuntime } from '../dist/scaler/backends/bare-metal/sealed-runtime.js';
import { AgentSpawner } from '../dist/scaler/backends/bare-metal/spawner/agent-spawner.js';
import { Claims } from '../dist/dispatch/claims.js';
import { AgentSession } from '../dist/server/agent-session.js';
import { median } from './stats.ts';
import { benchEntry, confinedLaunch } from './cold-start-floor.ts';
import { rawRig } from './cold-start.ts';
import { submitClient } from './submit-client.ts';

const AGENT = join(resolve(import.meta.dirname, '..'), 'dist/cli/agent.js');
// Marks are taken on this process's clock and made relative to the submit's send once it is known.
let marks: Record<string, number> = {};
const mark = (hop: string) => (marks[hop] ??= performance.now());

/** Marks `before` when the method is called and `after` when its promise settles. */
function wrap(proto: object, method: string, before: string | undefined, after: string): void {
  const p = proto as Record<string, (...a: unknown[]) => unknown>;
  const orig = p[method]!;
  p[method] = function (this: unknown, ...args: unknown[]) {
    if (before) mark(before);
    const out = orig.apply(this, args);
    return out instanceof Promise ? out.finally(() => mark(after)) : (mark(after), out);
  };
}
wrap(Dispatcher.prototype, 'submit', 'submit reached the dispatcher', 'submit stored');
wrap(
  SpawnsRepo.prototype,
  'insertSpawnAndToken',
  'spawn record asked for',
  'spawn record and token committed',
);
wrap(BareMetalScalerBackend.prototype, 'spawn', 'backend spawn called', 'agent process spawned');
wrap(AgentUserPool.prototype, 'acquire', undefined, 'uid claimed, home made');
wrap(SealedRuntime.prototype, 'for', undefined, 'sealed runtime found');
wrap(SessionsRepo.prototype, 'open', 'register received (session open asked)', 'session committed');
wrap(AgentSpawner.prototype, 'spawn', 'spawner asked', 'spawner answered with the pid');
wrap(Claims.prototype, 'claim', 'claim asked', 'claim committed');
// The first frame a connection sends is its registration: read here, before any check.
wrap(AgentSession.prototype, 'handle', 'registration read (first frame)', 'first frame handled');
{
  // Each frame the server sends an agent (register.ack, job.assign, ...), by its type.
  const p = AgentSession.prototype as unknown as Record<string, (msg: { type: string }) => void>;
  const send = p.send!;
  p.send = function (this: unknown, msg: { type: string }) {
    mark(`sent ${msg.type}`);
    return send.call(this, msg);
  };
}

const host = process.argv.includes('--host');
const agentMarks = process.argv.includes('--agent');
const n = Number(process.argv.find((a) => /^\d+$/.test(a)) ?? 10);
const dir = await mkdtemp(join(tmpdir(), 'kici-trace-'));
// The preload and the marks' directory must be reachable by an agent running as its own uid: not
// in the data dir, which the orchestrator keeps to itself.
const shared = await mkdtemp(join(tmpdir(), 'kici-trace-marks-'));
const traceDir = join(shared, 'marks');
const traceEnv = { NODE_OPTIONS: `--import=${join(shared, 'agent-marks.mjs')}`, BENCH_MARKS_DIR: traceDir };
if (agentMarks) {
  await chmod(shared, 0o755);
  await copyFile(join(import.meta.dirname, 'agent-marks.mjs'), join(shared, 'agent-marks.mjs'));
  await chmod(join(shared, 'agent-marks.mjs'), 0o644);
  await mkdir(traceDir);
  await chmod(traceDir, 0o1777);
}

/** The agents' marks since `since` (wall clock), in ms after it, first of each kind; the files are emptied. */
async function takeAgentMarks(since: number): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  if (!agentMarks) return out;
  for (const f of await readdir(traceDir)) {
    for (const line of (await readFile(join(traceDir, f), 'utf8')).split('\n').filter(Boolean)) {
      const { k, t } = JSON.parse(line) as { k: string; t: number };
      if (t >= since) out[k] ??= t - since;
    }
    await rm(join(traceDir, f));
  }
  return out;
}

const cfg = join(dir, 'scalers.yaml');
const labelSetEnv = agentMarks
  ? `        env:\n${Object.entries(traceEnv)
      .map(([k, v]) => `          ${k}: "${v}"\n`)
      .join('')}`
  : '';
await writeFile(
  cfg,
  `version: 1\nscalers:\n  - name: bm\n    type: bare-metal\n    maxAgents: 1\n    labelSets:\n      - labels: [linux, small]\n        binaryPath: ${AGENT}\n${host ? '        trust: host\n' : ''}${labelSetEnv}`,
);
const orch = await Orchestrator.start({
  port: 0,
  dataDir: dir,
  scalerConfigPath: cfg,
  logger: pino({ level: 'silent' }),
});
orch.events.on('agent.registered', () => mark('registration accepted'));
orch.events.on('job.started', () => mark('job assigned (job.started)'));
const all: Record<string, number[]> = {};
const settled = new Map<string, () => void>();
const done = new Set<string>();
orch.events.on('job.settled', ({ jobId }) => {
  done.add(jobId);
  settled.get(jobId)?.();
});
// The submits come from a process of their own, as a CI front end's would (submitter.ts).
const client = await submitClient();
// The floor by hand with the same marks: the confined launch from a small process.
const floor: Record<string, number[]> = {};
let floorAt = 0;
const byHand = agentMarks
  ? await confinedLaunch(benchEntry(host), dir, 'trace-floor').then(async (launch) => ({
      launch,
      rig: await rawRig('floor', launch, { env: traceEnv, at: (t) => (floorAt = t) }),
    }))
  : undefined;
try {
  for (let i = 0; i < n; i++) {
    marks = {};
    const res = await client.post(
      `${orch.url}/api/v1/runs`,
      { authorization: `Bearer ${orch.adminToken}`, 'content-type': 'application/json' },
      { jobs: { cold: { runsOn: ['linux', 'small'], steps: [{ run: 'true' }] } } },
    );
    const id = (JSON.parse(res.body) as { jobs: { id: string }[] }).jobs[0]!.id;
    if (!done.has(id)) await new Promise<void>((r) => settled.set(id, r));
    const step = await orch.store.db
      .selectFrom('step_results')
      .select('started_at')
      .where('job_id', '=', id)
      .executeTakeFirst();
    const t0 = res.at - performance.timeOrigin;
    for (const k of Object.keys(marks)) marks[k]! -= t0;
    // The server stamps in whole ms: the send is taken the same way.
    marks["step's own clock"] = step!.started_at.getTime() - Math.floor(res.at);
    while (orch.scaler!.entries().length || orch.scaler!.teardownsInFlight)
      await new Promise((r) => setTimeout(r, 5));
    Object.assign(marks, await takeAgentMarks(res.at));
    for (const [k, v] of Object.entries(marks)) (all[k] ??= []).push(v);
    if (byHand) {
      const took = await byHand.rig.once(i);
      const hand = { ...(await takeAgentMarks(floorAt)), 'registration read': took };
      for (const [k, v] of Object.entries(hand)) (floor[k] ??= []).push(v);
    }
  }
} finally {
  await client.close();
  await orch.stop();
  await byHand?.rig.close();
  await byHand?.launch.release();
}
await rm(dir, { recursive: true, force: true });
await rm(shared, { recursive: true, force: true });
const rows = Object.entries(all)
  .map(([k, v]) => [k, median(v)] as const)
  .sort((a, b) => a[1] - b[1]);
console.log(
  `${host ? 'unconfined (trust: host)' : 'confined'}, n=${n}, median ms after the submit was sent:`,
);
for (const [k, v] of rows) console.log(`${v.toFixed(1).padStart(7)}  ${k}`);
if (agentMarks) {
  console.log(
    `\nthe floor by hand (${host ? 'unconfined' : 'confined'}), n=${n}, median ms after its spawn:`,
  );
  const byTime = Object.entries(floor)
    .map(([k, v]) => [k, median(v)] as const)
    .sort((a, b) => a[1] - b[1]);
  for (const [k, v] of byTime) console.log(`${v.toFixed(1).padStart(7)}  ${k}`);
}
