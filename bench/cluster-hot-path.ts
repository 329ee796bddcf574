/**
 * Hot-path and cluster figures (run inside the system tier's network namespace for PostgreSQL):
 * `node bench/cluster-hot-path.ts` after `npm run build`.
 *
 * - orchestrator CPU per job: a 1,000-job burst on 4 static agents, user+system time of the
 *   server process from /proc/<pid>/stat, on PGlite and on PostgreSQL;
 * - jobs per second through one instance, and through three instances on one PostgreSQL
 *   (same 4 agents spread over them, submits round-robin);
 * - dispatch latency (submit → job started on an idle agent) p50/p99, on one instance and
 *   across instances (submitted to A, the only agents on B: woken by NOTIFY);
 * - first, the raw floor in the same run (bench/pglite-floor.ts), and with each burst the server's
 *   wake-ups per job. `node bench/cluster-hot-path.ts floor` prints the floor alone. Profiling knobs
 *   (KICI_BENCH_*) are listed in docs/clustering.md ("What a job costs").
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { openSync } from 'node:fs';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { cpus, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import pg from 'pg';
import { pgliteFloor } from './pglite-floor.ts';

// KICI_BENCH_ROOT: measure another build (e.g. the main branch's dist) with the same harness.
const ROOT = resolve(process.env.KICI_BENCH_ROOT ?? resolve(import.meta.dirname, '..'));
const NODE = join(ROOT, 'node_modules/.bin/node');
const TICK_MS = 10; // USER_HZ is 100 on Linux
const children: ChildProcess[] = [];
// KICI_BENCH_PIN=1: the server on CPU 0 and the agents on the others, so that the server's CPU
// time is not inflated by sharing a core (and its caches) with the agents' forks.
const PIN = process.env.KICI_BENCH_PIN === '1';

/** Extra node flags from an env var (space-separated), e.g. KICI_BENCH_SERVER_ARGS=--perf-basic-prof. */
const envFlags = (name: string): string[] => process.env[name]?.split(' ').filter(Boolean) ?? [];
const servers: ChildProcess[] = [];

async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', () => r()));
  const p = (s.address() as { port: number }).port;
  await new Promise<void>((r) => s.close(() => r()));
  return p;
}

interface Server {
  url: string;
  ws: string;
  pid: number;
  token: string;
  dir: string;
  child: ChildProcess;
}

/** Each server's data dir and token file, removed once every child has exited. */
const made: string[] = [];

async function startServer(dbUrl: string | undefined, id: string): Promise<Server> {
  const dir = await mkdtemp(join(tmpdir(), 'kici-bench-'));
  made.push(dir, `${dir}.admin-token`);
  const port = await freePort();
  const args = [
    join(ROOT, 'dist/cli/orchestrator.js'),
    'serve',
    '--listen',
    `127.0.0.1:${port}`,
    '--data-dir',
    dir,
    // The bootstrap token is written outside the data dir.
    '--admin-token-file',
    `${dir}.admin-token`,
  ];
  if (dbUrl) args.push('--database-url', dbUrl, '--instance-id', id);
  // KICI_BENCH_PROFILE=dir: the server writes a V8 CPU profile there when it stops (see stopProfiled).
  const prof = process.env.KICI_BENCH_PROFILE;
  const nodeArgs = prof ? ['--cpu-prof', '--cpu-prof-dir', prof] : [];
  nodeArgs.push(...envFlags('KICI_BENCH_SERVER_ARGS'));
  // KICI_BENCH_SERVER_OUT=file: the server's stdout and stderr go there.
  const out = process.env.KICI_BENCH_SERVER_OUT
    ? openSync(process.env.KICI_BENCH_SERVER_OUT, 'a')
    : undefined;
  const child = spawn(PIN ? 'taskset' : NODE, [...(PIN ? ['-c', '0', NODE] : []), ...nodeArgs, ...args], {
    env: { ...process.env, KICI_LOG_LEVEL: 'warn' },
    stdio: out === undefined ? 'ignore' : ['ignore', out, out],
  });
  children.push(child);
  servers.push(child);
  const url = `http://127.0.0.1:${port}`;
  for (let i = 0; i < 1200; i++) {
    if (
      await fetch(`${url}/readyz`).then(
        (r) => r.ok,
        () => false,
      )
    )
      break;
    await new Promise((r) => setTimeout(r, 100));
  }
  const token = (await readFile(`${dir}.admin-token`, 'utf8')).trim();
  return { url, ws: `ws://127.0.0.1:${port}/ws`, pid: child.pid!, token, dir, child };
}

async function api<T>(s: Server, method: string, path: string, body?: unknown): Promise<T> {
  const r = await fetch(`${s.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${s.token}`, ...(body ? { 'content-type': 'application/json' } : {}) },
    ...(body ? { body: JSON.stringify(body) } : {}),
  });
  return (await r.json()) as T;
}

const agentPids: number[] = [];

async function agent(s: Server, id: string, label: string): Promise<void> {
  const tok = await api<{ token: string }>(s, 'POST', '/api/v1/agents/tokens', {
    labels: ['linux', label],
    agentId: id,
  });
  // KICI_BENCH_PROFILE_AGENTS=dir: the agents write V8 CPU profiles there (SIGTERM at the end).
  const prof = process.env.KICI_BENCH_PROFILE_AGENTS;
  const nodeArgs = prof ? ['--cpu-prof', '--cpu-prof-dir', prof] : [];
  nodeArgs.push(...envFlags('KICI_BENCH_AGENT_ARGS'));
  const cmd = [...nodeArgs, join(ROOT, 'dist/cli/agent.js')];
  const child = spawn(
    PIN ? 'taskset' : NODE,
    PIN ? ['-c', `1-${Math.max(1, cpus().length - 1)}`, NODE, ...cmd] : cmd,
    {
      env: {
        ...process.env,
        KICI_ORCHESTRATOR_URL: s.ws,
        KICI_AGENT_ID: id,
        KICI_AGENT_TOKEN: tok.token,
        KICI_LABELS: `linux,${label}`,
      },
      stdio: 'ignore',
    },
  );
  children.push(child);
  agentPids.push(child.pid!);
}

/** The agents' CPU beside the server's: on a small machine they compete for the same cores. */
async function agentsCpuMs(): Promise<number> {
  let sum = 0;
  for (const pid of agentPids) sum += await cpuMs(pid).catch(() => 0);
  return sum;
}

async function cpuMs(pid: number): Promise<number> {
  const [user, sys] = await cpuSplitMs(pid);
  return user + sys;
}

/**
 * Times the server's threads went to sleep and were woken (voluntary context switches, all threads):
 * on a virtual machine the first work after a wake-up runs several times slower than back to back,
 * so this is reported beside the CPU.
 */
async function wakeups(pid: number): Promise<number> {
  let n = 0;
  for (const tid of await readdir(`/proc/${pid}/task`).catch(() => [] as string[])) {
    const st = await readFile(`/proc/${pid}/task/${tid}/status`, 'utf8').catch(() => '');
    n += Number(/voluntary_ctxt_switches:\s+(\d+)/.exec(st)?.[1] ?? 0);
  }
  return n;
}

/** utime and stime (fields 14 and 15 of /proc/<pid>/stat), in ms. */
async function cpuSplitMs(pid: number): Promise<[number, number]> {
  const f = (await readFile(`/proc/${pid}/stat`, 'utf8')).split(') ')[1]!.split(' ');
  return [Number(f[11]) * TICK_MS, Number(f[12]) * TICK_MS];
}

/**
 * KICI_BENCH_PERF=file: `perf record` the server during the burst alone (start it with
 * KICI_BENCH_SERVER_ARGS=--perf-basic-prof to name its JavaScript frames).
 */
function perfRecord(pid: number): (() => Promise<void>) | undefined {
  const file = process.env.KICI_BENCH_PERF;
  if (!file) return undefined;
  const p = spawn('perf', ['record', '-e', 'cpu-clock', '-F', '1999', '-g', '-p', String(pid), '-o', file], {
    stdio: 'ignore',
  });
  return () =>
    new Promise((r) => {
      p.once('exit', r);
      p.kill('SIGINT');
    });
}

/** Each job appends one byte to a file: completion is counted without asking the server (whose CPU we measure). */
const MARKS = join(tmpdir(), `kici-bench-marks-${process.pid}`);

async function marks(): Promise<number> {
  return (await readFile(MARKS, 'utf8').catch(() => '')).length;
}

async function burst(
  servers: Server[],
  n: number,
  label: string,
  totalAfter: number,
): Promise<{ wallMs: number }> {
  const t0 = performance.now();
  for (let r = 0; r * 100 < n; r++) {
    const s = servers[r % servers.length]!;
    const jobs = Object.fromEntries(
      Array.from({ length: Math.min(100, n - r * 100) }, (_, k) => [
        `j${k}`,
        { runsOn: ['linux', label], steps: [{ run: `printf x >> ${MARKS}` }] },
      ]),
    );
    await api(s, 'POST', '/api/v1/runs', { jobs });
  }
  while ((await marks()) < totalAfter) await new Promise((r) => setTimeout(r, 50));
  const wallMs = performance.now() - t0;
  await new Promise((r) => setTimeout(r, 300)); // the last results reach the store
  return { wallMs };
}

async function latency(
  submitTo: Server,
  readFrom: Server,
  label: string,
  n: number,
): Promise<{ p50: number; p99: number }> {
  const samples: number[] = [];
  for (let i = 0; i < n; i++) {
    const res = await api<{ jobs: { id: string }[] }>(submitTo, 'POST', '/api/v1/runs', {
      jobs: { l: { runsOn: ['linux', label], steps: [{ run: 'true' }] } },
    });
    const id = res.jobs[0]!.id;
    for (;;) {
      const j = await api<{ state: string; createdAt: string; startedAt: string | null }>(
        readFrom,
        'GET',
        `/api/v1/jobs/${id}`,
      );
      if (j.state === 'succeeded') {
        samples.push(new Date(j.startedAt!).getTime() - new Date(j.createdAt).getTime());
        break;
      }
      await new Promise((r) => setTimeout(r, 20));
    }
  }
  samples.sort((a, b) => a - b);
  return { p50: samples[Math.floor(n * 0.5)]!, p99: samples[Math.min(n - 1, Math.floor(n * 0.99))]! };
}

const created: string[] = [];

async function freshDb(): Promise<string> {
  const admin = process.env.KICI_TEST_DATABASE_URL!;
  const name = `bench_${randomBytes(4).toString('hex')}`;
  created.push(name);
  const c = new pg.Client({ connectionString: admin });
  await c.connect();
  await c.query(`create database ${name}`);
  await c.end();
  const u = new URL(admin);
  u.pathname = `/${name}`;
  return u.toString();
}

async function single(dbUrl: string | undefined, what: string) {
  await rm(MARKS, { force: true });
  const s = await startServer(dbUrl, `bench-${what}`);
  for (let i = 0; i < 4; i++) await agent(s, `b-${what}-${i}`, `b-${what}`);
  await new Promise((r) => setTimeout(r, 1500));
  const warm = Number(process.env.KICI_BENCH_WARMUP ?? 20);
  await burst([s], warm, `b-${what}`, warm); // warm-up
  const perf = perfRecord(s.pid);
  const [s0, a0, w0] = [await cpuSplitMs(s.pid), await agentsCpuMs(), await wakeups(s.pid)];
  const { wallMs } = await burst([s], 1000, `b-${what}`, warm + 1000);
  const [s1, a1, w1] = [await cpuSplitMs(s.pid), await agentsCpuMs(), await wakeups(s.pid)];
  await perf?.();
  const [user, sys] = [(s1[0] - s0[0]) / 1000, (s1[1] - s0[1]) / 1000];
  const lat = await latency(s, s, `b-${what}`, 50);
  console.log(
    `${what}: CPU ${(user + sys).toFixed(2)} ms/job (user ${user.toFixed(2)}, system ${sys.toFixed(2)}; ${((w1 - w0) / 1000).toFixed(1)} wake-ups/job), ${(1000 / (wallMs / 1000)).toFixed(0)} jobs/s, dispatch latency p50 ${lat.p50} ms p99 ${lat.p99} ms (the 4 agents: ${((a1 - a0) / 1000).toFixed(1)} ms CPU/job)`,
  );
}

async function three(dbUrl: string) {
  await rm(MARKS, { force: true });
  const ss = [
    await startServer(dbUrl, 'b3-a'),
    await startServer(dbUrl, 'b3-b'),
    await startServer(dbUrl, 'b3-c'),
  ];
  for (let i = 0; i < 4; i++) await agent(ss[1 + (i % 2)]!, `b3-${i}`, 'b3');
  await new Promise((r) => setTimeout(r, 1500));
  const warm = Number(process.env.KICI_BENCH_WARMUP ?? 20);
  await burst(ss, warm, 'b3', warm);
  const cpu0 = await Promise.all(ss.map((s) => cpuMs(s.pid)));
  const { wallMs } = await burst(ss, 1000, 'b3', warm + 1000);
  const cpu1 = await Promise.all(ss.map((s) => cpuMs(s.pid)));
  const cpu = cpu1.reduce((a, b, i) => a + b - cpu0[i]!, 0);
  // Per instance: A holds no agent (it only takes submits), B and C run the jobs.
  const [a, b, c] = cpu1.map((x, i) => ((x - cpu0[i]!) / 1000).toFixed(2));
  const lat = await latency(ss[0]!, ss[1]!, 'b3', 50);
  console.log(
    `three instances on PostgreSQL: CPU ${(cpu / 1000).toFixed(2)} ms/job (sum of 3: A ${a}, B ${b}, C ${c}), ${(1000 / (wallMs / 1000)).toFixed(0)} jobs/s, cross-instance dispatch latency (submit to A, agents on B/C) p50 ${lat.p50} ms p99 ${lat.p99} ms`,
  );
}

try {
  const only = process.argv[2];
  if (!only || only === 'pglite' || only === 'floor') {
    const f = await pgliteFloor(ROOT);
    console.log(
      `raw floor: PGlite's own CPU for one job's commit (step row, result, next claim) ${f.warmMs.toFixed(2)} ms back to back, ` +
        `${f.coldMs.toFixed(2)} ms after a ${f.gapMs} ms sleep each (one job per wake-up), ${f.cold4Ms.toFixed(2)} ms with 4 jobs per wake-up; ` +
        `one bare wake-up of Node ${f.wakeupMs.toFixed(2)} ms`,
    );
  }
  if (!only || only === 'pglite') await single(undefined, 'pglite');
  if (!only || only === 'postgres') await single(await freshDb(), 'postgres');
  if (!only || only === 'three') await three(await freshDb());
} finally {
  // A profiled process must stop gracefully, or V8 never writes its profile.
  const profiled = [
    ...(process.env.KICI_BENCH_PROFILE_AGENTS ? children.filter((c) => !servers.includes(c)) : []),
    ...(process.env.KICI_BENCH_PROFILE ? servers : []),
  ];
  if (profiled.length)
    await Promise.all(
      profiled.map(
        (c) =>
          new Promise((r) => {
            if (c.exitCode !== null || c.signalCode !== null) return r(undefined);
            c.once('exit', r);
            c.kill('SIGTERM');
          }),
      ),
    );
  for (const c of children) c.kill('SIGKILL');
  await Promise.all(
    children
      .filter((c) => c.exitCode === null && c.signalCode === null)
      .map((c) => new Promise((r) => c.once('exit', r))),
  );
  await rm(MARKS, { force: true });
  for (const p of made) await rm(p, { recursive: true, force: true });
  if (created.length) {
    const c = new pg.Client({ connectionString: process.env.KICI_TEST_DATABASE_URL });
    await c.connect();
    for (const name of created) await c.query(`drop database if exists ${name} with (force)`);
    await c.end();
  }
}
