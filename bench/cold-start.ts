/**
 * Submit-to-first-step latency on a cold bare-metal agent (median of N jobs, one at a time), beside
 * the raw cost of starting the same agent binary and having it connect and register to a bare
 * WebSocket server, measured in the same run.
 *
 * Floors: by default a bare-metal agent is confined (its own uid, or the bubblewrap sandbox, as the
 * host allows), which the raw start does not pay. So the same agent is also started by hand under
 * that confinement (see cold-start-floor.ts), and the same cold start with the label set at
 * `trust: host` (unconfined) is measured, all in the same run, in blocks of a few starts each taken
 * in turn: on a shared host the speed of a start drifts by a tenth within a minute, and four long
 * runs one after the other compared different minutes.
 *
 * With the confined floor comes the least any orchestrator does for the same start
 * (minimal-server.ts): the submit answered, that launch, the ack and the job in one turn, nothing
 * stored or checked. Ours over it is what storing, checking and scheduling cost.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { pino } from 'pino';
import { Orchestrator } from '../dist/server/orchestrator.js';
import { benchEntry, confinedLaunch, handStartEnv, type ConfinedLaunch } from './cold-start-floor.ts';
import { fmt, median, percentile, type BenchResult } from './stats.ts';
import { lineChild } from './line-child.ts';
import { minimalRig, syncedCommitAfterIdle } from './cold-start-minimal.ts';
import { submitClient } from './submit-client.ts';

const ROOT = resolve(import.meta.dirname, '..');
const AGENT = join(ROOT, 'dist/cli/agent.js');

/** One way of starting an agent, kept ready between blocks of starts so they can be interleaved. */
export interface Rig {
  /** One start, timed in ms. */
  once(i: number): Promise<number>;
  close(): Promise<void>;
}

/**
 * The agent binary started by hand and timed from spawn to its first message on a bare WebSocket
 * server, both in a small child process (raw-starter.ts) so the fork is a bare Node's. Without
 * `confined` it is the raw start; with it, the same start under the confinement a cold start of
 * ours pays (the uid switch, the sandbox when the host's plan has one, the sealed Node), prepared
 * before the clock starts: the floor no orchestrator can go below.
 */
export async function rawRig(
  name: string,
  confined?: ConfinedLaunch,
  /** More variables for the agent (the trace's preload), and who is told each spawn's wall-clock time. */
  extra: { env?: Record<string, string>; at?: (at: number) => void } = {},
): Promise<Rig> {
  const starter = await lineChild<{ took: number; at: number }>('raw-starter.ts', `${name} starter`);
  return {
    once(i) {
      const env = handStartEnv(`${name}-${i}`, confined, extra.env);
      return starter
        .ask({ file: confined?.file ?? AGENT, args: confined?.args ?? [], env, ...confined?.as })
        .then((a) => {
          extra.at?.(a.at);
          return a.took;
        });
    },
    close: () => starter.close(),
  };
}

/**
 * Our orchestrator with one bare-metal label set: submit → the server's stamp of the first step's
 * start (the agent sends it just before it spawns the step's shell). Beside it, in `own`, submit →
 * the step's own clock (`date +%s%N`, run by that shell, read back from the job's log): the same
 * start with the shell's spawn and its fork and exec of `date` in it.
 */
async function ourRig(trustHost = false): Promise<Rig & { own: number[] }> {
  const dir = await mkdtemp(join(tmpdir(), 'kici-bench-'));
  const cfg = join(dir, 'scalers.yaml');
  await writeFile(
    cfg,
    `version: 1\nscalers:\n  - name: bm\n    type: bare-metal\n    maxAgents: 1\n    labelSets:\n      - labels: [linux, small]\n        binaryPath: ${AGENT}\n${trustHost ? '        trust: host\n' : ''}`,
  );
  const orch = await Orchestrator.start({
    port: 0,
    dataDir: dir,
    scalerConfigPath: cfg,
    logger: pino({ level: 'silent' }),
  });
  // Waits on the orchestrator's own event rather than asking the store every few ms: a poll loop
  // would compete for the same CPU as the agent starting up, which the raw start does not pay.
  const settled = new Set<string>();
  const waiters = new Map<string, () => void>();
  const off = orch.events.on('job.settled', ({ jobId }) => {
    settled.add(jobId);
    waiters.get(jobId)?.();
  });
  const own: number[] = [];
  const auth = { authorization: `Bearer ${orch.adminToken}` };
  // The submit comes from a process of its own, as a CI front end's would (submitter.ts).
  const client = await submitClient();
  return {
    own,
    async once() {
      const res = await client.post(
        `${orch.url}/api/v1/runs`,
        { ...auth, 'content-type': 'application/json' },
        { jobs: { cold: { runsOn: ['linux', 'small'], steps: [{ run: 'date +%s%N' }] } } },
      );
      if (res.status !== 201) throw new Error(`submit answered ${res.status}: ${res.body}`);
      // The server stamps the step's start in whole ms, so the send is taken the same way.
      const wall0 = Math.floor(res.at);
      const wallExact = res.at;
      const { jobs } = JSON.parse(res.body) as { jobs: { id: string }[] };
      const id = jobs[0]!.id;
      if (!settled.has(id)) await new Promise<void>((r) => waiters.set(id, r));
      waiters.delete(id);
      let took: number | undefined;
      while (took === undefined) {
        const step = await orch.store.db
          .selectFrom('step_results')
          .select('started_at')
          .where('job_id', '=', id)
          .executeTakeFirst();
        const job = await orch.store.jobs.get(id);
        if (step && job && ['succeeded', 'failed'].includes(job.state))
          took = step.started_at.getTime() - wall0;
        else await new Promise((r) => setTimeout(r, 5));
      }
      const logs = (await (await fetch(`${orch.url}/api/v1/jobs/${id}/logs`, { headers: auth })).json()) as {
        lines: { line: string }[];
      };
      const ns = logs.lines.map((l) => l.line.trim()).find((l) => /^\d{16,}$/.test(l));
      if (ns === undefined) throw new Error(`job ${id} printed no clock reading`);
      own.push(Number(BigInt(ns) / 1000n) / 1000 - wallExact);
      // Cold means cold: wait until the previous agent is gone, its teardown (which goes on after its
      // capacity is given back) included.
      while (orch.scaler!.entries().length || orch.scaler!.teardownsInFlight)
        await new Promise((r) => setTimeout(r, 5));
      return took;
    },
    async close() {
      off();
      await client.close();
      await orch.stop();
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/** Starts per rig per block: small, so a host that speeds up or slows down does so for all alike. */
const BLOCK = 5;

/**
 * n starts of each rig, in blocks of BLOCK taken in turn, the order of the rigs rotating from one
 * round of blocks to the next: the ratios compare starts made within seconds of each other.
 */
async function interleaved(rigs: Rig[], n: number): Promise<number[][]> {
  const out = rigs.map(() => [] as number[]);
  for (let round = 0, done = 0; done < n; round++, done += BLOCK) {
    for (let k = 0; k < rigs.length; k++) {
      const r = (k + round) % rigs.length;
      for (let i = done; i < Math.min(n, done + BLOCK); i++) out[r]!.push(await rigs[r]!.once(i));
    }
  }
  return out;
}

export async function benchColdStart(n = 50): Promise<BenchResult> {
  // The floor's placement is made once, before any clock starts, and undone at the end.
  const floorDir = await mkdtemp(join(tmpdir(), 'kici-bench-floor-'));
  const entry = benchEntry();
  // A host that cannot confine agents (not root, no bubblewrap) has no floor to measure; the
  // confined start below then fails with the orchestrator's own refusal.
  const floorLaunch = await confinedLaunch(entry, floorDir, 'bench-floor').catch((err: unknown) => {
    console.error(`floor of a confined start not measured: ${(err as Error).message}`);
    return undefined;
  });
  const rigs: Rig[] = [];
  let raw: number[], floor: number[], ours: number[], host: number[], minimal: number[];
  let own: number[];
  try {
    const confined = await ourRig();
    own = confined.own;
    rigs.push(await rawRig('raw'), confined, await ourRig(true));
    if (floorLaunch) rigs.push(await rawRig('floor', floorLaunch), await minimalRig(floorLaunch));
    [raw, ours, host, floor = [], minimal = []] = (await interleaved(rigs, n)) as [
      number[],
      number[],
      number[],
      number[]?,
      number[]?,
    ];
  } finally {
    for (const r of rigs) await r.close();
    await floorLaunch?.release();
    await rm(floorDir, { recursive: true, force: true });
  }
  // After the starts, so its idle spells and syncs do not fall between them.
  const commit = floorLaunch ? await syncedCommitAfterIdle() : 0;
  const ratio = median(ours) / median(raw);
  const x = (a: number[], b: number[]) => (median(a) / median(b)).toFixed(2);
  // Block by block (starts made within seconds of each other), the spread of the ratio to raw.
  const blocks = (a: number[]) =>
    Array.from({ length: Math.ceil(n / BLOCK) }, (_, b) => {
      const at = (v: number[]) => median(v.slice(b * BLOCK, (b + 1) * BLOCK));
      return at(a) / at(raw);
    }).sort((p, q) => p - q);
  const spread = (a: number[]) => {
    const r = blocks(a);
    return `${median(r).toFixed(2)} × (blocks ${r[0]!.toFixed(2)}–${r.at(-1)!.toFixed(2)})`;
  };
  return {
    name: 'cold bare-metal agent: submit → first step',
    value: median(ours),
    unit: 'ms',
    ratio,
    target: 'ratio ≤ 1.15',
    pass: ratio <= 1.15,
    detail:
      `ours median ${fmt(median(ours))} ms (p95 ${fmt(percentile(ours, 95))}), raw agent start+connect median ${fmt(median(raw))} ms (p95 ${fmt(percentile(raw, 95))}), n=${n}; ` +
      `to the step's own clock (date in the step: its shell's spawn and date's fork and exec included) median ${fmt(median(own))} ms, ${x(own, raw)} × raw; ` +
      (floorLaunch
        ? `floor of a confined start (${floorLaunch.mode}, by hand, no orchestrator) median ${fmt(median(floor))} ms (p95 ${fmt(percentile(floor, 95))}), ${x(floor, raw)} × raw; ` +
          `confined ${x(ours, floor)} × its floor; ` +
          `the least an orchestrator does (minimal-server.ts: that launch, no store, the ack and the job in one turn) median ${fmt(median(minimal))} ms (p95 ${fmt(percentile(minimal, 95))}), ${x(minimal, raw)} × raw; confined ${x(ours, minimal)} × that; ` +
          `one synced commit of the embedded store after an idle spell ${commit.toFixed(2)} ms, so the least a start that loses nothing takes (that plus one commit) ${fmt(median(minimal) + commit)} ms, ${((median(minimal) + commit) / median(raw)).toFixed(2)} × raw; `
        : 'floor of a confined start not measured on this host; ') +
      `unconfined (trust: host) median ${fmt(median(host))} ms, ` +
      `${x(host, raw)} × raw; confined ${x(ours, host)} × unconfined; block by block, ours ${spread(ours)} raw, ` +
      `unconfined ${spread(host)}` +
      (floorLaunch ? `, floor ${spread(floor)}, minimal ${spread(minimal)}` : ''),
  };
}

if (import.meta.url === pathToFileURL(process.argv[1]!).href) {
  const r = await benchColdStart(Number(process.argv[2] ?? 50));
  console.log(JSON.stringify(r, null, 2));
}
