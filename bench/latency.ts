/**
 * `npm run bench -- latency [--base <commit>] [--rounds <n>] [--jobs <n>] [--samples <n>]`:
 * job-start latency of this build beside another commit's (default 09079b4), the two builds
 * alternating in the same run so that the machine's load falls on both alike.
 *
 * - warm hit: one idle static agent per build; submit → the first step's own clock (`date +%s%N` in
 *   the step), median of `--samples` (15) per round, the builds' servers up together and taking
 *   turns hit by hit;
 * - burst: `--jobs` (1,000) one-step jobs on 4 static agents, wall time until every step ran, and
 *   the server's CPU (user + system) per job.
 *
 * `--agents this|base` runs every server with one build's agents, to tell whose side a change is on.
 *
 * Floor: this build makes each commit of its embedded database reach the disk (fdatasync) before it
 * answers, and 09079b4 did not (its database ran without syncing). A warm hit waits for one such
 * commit (the submit's, which also claims the idle agent). The cost of one fdatasync of a small
 * write on the same filesystem is measured in every round, and the warm-hit ratio is also given
 * against 09079b4 plus that floor. `--nosync` also runs this build with KICI_DATA_SYNC=off in every
 * round (the floor taken away), so all three figures can be read without it.
 */
import { appendFile, open, readFile, rm } from 'node:fs/promises';
import { loadavg, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { api, buildOf, cpuMs, startAgent, startServer, stopAll, type Server } from './harness.ts';
import { median, type BenchResult } from './stats.ts';

const HERE = resolve(import.meta.dirname, '..');

function flag(name: string, dflt: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 && process.argv[i + 1] ? process.argv[i + 1]! : dflt;
}

const wallNow = () => performance.timeOrigin + performance.now();

async function lines(file: string): Promise<string[]> {
  return (await readFile(file, 'utf8').catch(() => '')).split('\n').filter(Boolean);
}

async function waitLines(file: string, n: number, timeoutMs: number): Promise<string[]> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const l = await lines(file);
    if (l.length >= n) return l;
    if (Date.now() > until) throw new Error(`only ${l.length} of ${n} steps ran within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

/** One warm hit on `s`: submit → the step's own clock, in ms; returns once the agent is idle again. */
async function warmHit(s: Server, marks: string): Promise<number> {
  await rm(marks, { force: true });
  const t0 = wallNow();
  const run = await api<{ jobs: { id: string }[] }>(s, 'POST', '/api/v1/runs', {
    jobs: { hit: { runsOn: ['linux', 'warm'], steps: [{ run: `date +%s%N >> ${marks}` }] } },
  });
  const [ns] = await waitLines(marks, 1, 30_000);
  // The agent is idle again (its result stored) before the next hit, as a warm agent would be.
  for (;;) {
    const j = await api<{ state: string }>(s, 'GET', `/api/v1/jobs/${run.jobs[0]!.id}`);
    if (j.state === 'succeeded') break;
    await new Promise((r) => setTimeout(r, 10));
  }
  return Number(BigInt(ns!) / 1000n) / 1000 - t0;
}

async function burst(s: Server, n: number, marks: string): Promise<{ wallMs: number; cpuPerJob: number }> {
  await rm(marks, { force: true });
  const submit = async (count: number) => {
    for (let r = 0; r * 100 < count; r++) {
      const jobs = Object.fromEntries(
        Array.from({ length: Math.min(100, count - r * 100) }, (_, k) => [
          `j${k}`,
          { runsOn: ['linux', 'burst'], steps: [{ run: `printf 'x\\n' >> ${marks}` }] },
        ]),
      );
      await api(s, 'POST', '/api/v1/runs', { jobs });
    }
  };
  await submit(20); // warm-up
  await waitLines(marks, 20, 60_000);
  await new Promise((r) => setTimeout(r, 500));
  const c0 = await cpuMs(s.pid);
  const t0 = performance.now();
  await submit(n);
  await waitLines(marks, 20 + n, 600_000);
  const wallMs = performance.now() - t0;
  await new Promise((r) => setTimeout(r, 300)); // the last results reach the store
  return { wallMs, cpuPerJob: ((await cpuMs(s.pid)) - c0) / n };
}

/** Median wall time of one fdatasync after an 8 KiB append in `dir` (the data dir's filesystem). */
async function fsyncFloor(dir: string, n = 30): Promise<number> {
  const f = await open(join(dir, 'fsync-floor'), 'a');
  const block = Buffer.alloc(8192, 1);
  const out: number[] = [];
  try {
    for (let i = 0; i < n; i++) {
      await f.write(block);
      const t0 = performance.now();
      await f.datasync();
      out.push(performance.now() - t0);
    }
  } finally {
    await f.close();
  }
  return median(out);
}

type Which = 'head' | 'base' | 'nosync';

interface Round {
  hits: number[];
  wallMs: number;
  cpuPerJob: number;
}

async function serverOf(root: string, noSync: boolean): Promise<Server> {
  if (noSync) process.env.KICI_DATA_SYNC = 'off';
  return startServer(root).finally(() => delete process.env.KICI_DATA_SYNC);
}

/**
 * Warm hits on every build's server at once, taking turns hit by hit (the order rotating), so a
 * busy moment of a shared machine falls on all of them alike. Also the fdatasync floor.
 */
async function warmRound(
  builds: { which: Which; root: string }[],
  samples: number,
  agentRoot: string | undefined,
): Promise<{ hits: Map<Which, number[]>; fsyncMs: number }> {
  const hits = new Map<Which, number[]>(builds.map((b) => [b.which, []]));
  try {
    const servers: { which: Which; s: Server; marks: string }[] = [];
    for (const b of builds) {
      const s = await serverOf(b.root, b.which === 'nosync');
      await startAgent(s, 'warm-1', ['linux', 'warm'], agentRoot);
      servers.push({ which: b.which, s, marks: join(tmpdir(), `kici-latency-${process.pid}-${b.which}`) });
    }
    for (let i = 0; i < samples + 2; i++)
      for (let k = 0; k < servers.length; k++) {
        const { which, s, marks } = servers[(i + k) % servers.length]!;
        const ms = await warmHit(s, marks);
        if (i >= 2) hits.get(which)!.push(ms); // the first two warm the path
        await new Promise((r) => setTimeout(r, 300)); // its marks are stored too: a quiet, warm server
      }
    const fsyncMs = await fsyncFloor(servers[0]!.s.dir);
    for (const x of servers) await rm(x.marks, { force: true });
    return { hits, fsyncMs };
  } finally {
    await stopAll();
  }
}

async function burstRound(
  root: string,
  jobs: number,
  agentRoot: string | undefined,
  noSync: boolean,
): Promise<{ wallMs: number; cpuPerJob: number }> {
  const marks = join(tmpdir(), `kici-latency-${process.pid}`);
  try {
    const s = await serverOf(root, noSync);
    for (let i = 0; i < 4; i++) await startAgent(s, `burst-${i}`, ['linux', 'burst'], agentRoot);
    return await burst(s, jobs, marks);
  } finally {
    await stopAll();
    await rm(marks, { force: true });
  }
}

export async function benchLatency(): Promise<BenchResult[]> {
  const base = flag('base', '09079b4');
  const rounds = Number(flag('rounds', '2'));
  const samples = Number(flag('samples', '15'));
  const jobs = Number(flag('jobs', '1000'));
  const baseRoot = await buildOf(HERE, base);
  // --agents this|base: every server gets the agents of one build (to tell whose side moved).
  const agentsOf = flag('agents', 'own');
  const agentRoot = agentsOf === 'this' ? HERE : agentsOf === 'base' ? baseRoot : undefined;
  const noSync = process.argv.includes('--nosync');
  const res: Record<Which, Round[]> = { head: [], base: [], nosync: [] };
  const names: Record<Which, string> = { head: 'this build', base, nosync: 'this build, data sync off' };
  const fsync: number[] = [];
  for (let r = 0; r < rounds; r++) {
    // Alternate which goes first, so neither always runs on the fresher machine.
    const order: Which[] = r % 2 ? ['base', 'head'] : ['head', 'base'];
    if (noSync) order.splice(1, 0, 'nosync');
    const builds = order.map((which) => ({ which, root: which === 'base' ? baseRoot : HERE }));
    const warm = await warmRound(builds, samples, agentRoot);
    fsync.push(warm.fsyncMs);
    for (const { which, root } of builds) {
      const round = {
        hits: warm.hits.get(which)!,
        ...(await burstRound(root, jobs, agentRoot, which === 'nosync')),
      };
      res[which].push(round);
      process.stdout.write(
        `  round ${r + 1} ${names[which]}: warm hit median ${median(round.hits).toFixed(1)} ms, ` +
          `burst ${(round.wallMs / 1000).toFixed(2)} s, ${round.cpuPerJob.toFixed(2)} ms CPU/job\n`,
      );
    }
    process.stdout.write(
      `  round ${r + 1}: fdatasync floor ${warm.fsyncMs.toFixed(2)} ms, load ${loadavg()[0]!.toFixed(1)}\n`,
    );
  }
  const agg = (rs: Round[]) => ({
    hit: median(rs.flatMap((x) => x.hits)),
    wall: median(rs.map((x) => x.wallMs)),
    cpu: median(rs.map((x) => x.cpuPerJob)),
  });
  const [h, b] = [agg(res.head), agg(res.base)];
  const n = noSync ? agg(res.nosync) : undefined;
  const fsyncMs = median(fsync);
  const line = (what: string, hv: number, bv: number, unit: string, nv?: number) =>
    `${what}: this build ${hv.toFixed(2)} ${unit}, ${base} ${bv.toFixed(2)} ${unit} (${rounds} rounds, alternating)` +
    (nv === undefined
      ? ''
      : `; without data sync ${nv.toFixed(2)} ${unit}, ${(nv / bv).toFixed(2)} × ${base}`);
  return [
    {
      name: `warm hit, submit → first step (median of ${samples}×${rounds})`,
      value: h.hit,
      unit: 'ms',
      ratio: h.hit / b.hit,
      target: `at most 0.8 × ${base}`,
      pass: h.hit <= 0.8 * b.hit,
      detail:
        `${line('median', h.hit, b.hit, 'ms', n?.hit)}; floor: one commit's fdatasync, ${fsyncMs.toFixed(2)} ms ` +
        `(09079b4 did not sync); against ${base} plus it: ${(h.hit / (b.hit + fsyncMs)).toFixed(2)} ×`,
    },
    {
      name: `burst of ${jobs} jobs on 4 static agents, wall time`,
      value: h.wall / 1000,
      unit: 's',
      ratio: h.wall / b.wall,
      target: `at most 1.0 × ${base}`,
      pass: h.wall <= b.wall,
      detail: line('wall', h.wall / 1000, b.wall / 1000, 's', n && n.wall / 1000),
    },
    {
      name: `burst of ${jobs} jobs, server CPU per job`,
      value: h.cpu,
      unit: 'ms CPU/job',
      ratio: h.cpu / b.cpu,
      target: `at most 0.5 × ${base}`,
      pass: h.cpu <= 0.5 * b.cpu,
      detail: line('CPU', h.cpu, b.cpu, 'ms/job', n?.cpu),
    },
  ];
}

// Direct use: node bench/latency.ts [flags]
if (import.meta.main) {
  for (const r of await benchLatency()) await appendFile('/dev/stdout', `${JSON.stringify(r)}\n`);
}
