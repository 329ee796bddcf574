/**
 * The queue half of `npm run bench -- scale`: M queued jobs through real servers, on the embedded
 * store (one instance) or on PostgreSQL (`--pg <url> --instances 3`, figures summed over them).
 *
 * Submit rate, store size, RSS, the reconcile pass's planning time (from the server's own counters
 * on /metrics), `/api/v1/jobs` page times, the time `--fleet` synthetic agents take to drain the
 * first `--drain` jobs, and a graceful restart of one instance with the queue still full.
 */
import { execFile } from 'node:child_process';
import { request } from 'node:http';
import { promisify } from 'node:util';
import pg from 'pg';
import { SyntheticFleet, type FleetAgentSpec } from './fleet/fleet.ts';
import { api, cpuMs, mintToken, rssBytes, startServer, stopAll, stopServer, type Server } from './harness.ts';
import { median } from './stats.ts';

const exec = promisify(execFile);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const LABELS = ['linux', 'queue'];

export interface QueueFigures {
  m: number;
  instances: number;
  submitPerS: number;
  submitCpuMsPerJob: number;
  storeMiB: number;
  rssMiB: number;
  /** Mean planning time of one pass over the full queue, per instance and summed. */
  planMs: number;
  planMsSum: number;
  /** GET /api/v1/jobs?limit=100 and ?state=queued&limit=100, median of 5 (ms). */
  listMs: number;
  listQueuedMs: number;
  drainPerS: number;
  drained: number;
  /** Mean planning time per pass while draining (1,000 agents taking jobs), summed over instances. */
  drainPlanMs: number;
  restartS: number;
  rssAfterRestartMiB: number;
}

/**
 * A submit on a connection of its own: on a starved host a kept-alive socket can be closed by the
 * server just as the next run is written to it, and a run cannot be sent twice to find out.
 */
function submitRun(s: Server, body: unknown): Promise<void> {
  const data = JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const req = request(
      `${s.url}/api/v1/runs`,
      {
        method: 'POST',
        agent: false,
        headers: { authorization: `Bearer ${s.token}`, 'content-type': 'application/json' },
      },
      (res) => {
        let text = '';
        res.on('data', (d: Buffer) => (text += String(d)));
        res.on('end', () =>
          res.statusCode === 201 || res.statusCode === 200
            ? resolve()
            : reject(new Error(`POST /api/v1/runs: ${res.statusCode} ${text.slice(0, 300)}`)),
        );
      },
    );
    req.on('error', reject);
    req.end(data);
  });
}

/** A read, tried again when a kept-alive socket was reset under it (reads can be repeated). */
async function again<T>(f: () => Promise<T>): Promise<T> {
  for (let i = 0; ; i++) {
    try {
      return await f();
    } catch (err) {
      if (i >= 3 || !String((err as { cause?: unknown }).cause ?? err).includes('ECONNRESET')) throw err;
    }
  }
}

async function metric(s: Server, name: string): Promise<number> {
  const text = await again(async () => {
    const r = await fetch(`${s.url}/metrics`, { headers: { authorization: `Bearer ${s.token}` } });
    return r.text();
  });
  const line = text.split('\n').find((l) => l.startsWith(`${name} `));
  return Number(line?.split(' ')[1] ?? NaN);
}
const passes = (s: Server) => metric(s, 'kici_orch_dispatch_passes_total');
const planS = (s: Server) => metric(s, 'kici_orch_dispatch_plan_seconds_total');

async function timed(f: () => Promise<unknown>, n = 5): Promise<number> {
  const t: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    await f();
    t.push(performance.now() - t0);
  }
  return median(t);
}

/** A fresh database on the bench's PostgreSQL server for one queue size. */
async function freshDatabase(url: string, name: string): Promise<string> {
  const u = new URL(url);
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    await client.query(`drop database if exists ${name} with (force)`);
    await client.query(`create database ${name}`);
  } finally {
    await client.end();
  }
  u.pathname = `/${name}`;
  return u.toString();
}

async function storeMiB(s: Server, dbUrl: string | undefined): Promise<number> {
  if (!dbUrl) return Number((await exec('du', ['-sb', s.dir])).stdout.split('\t')[0]) / 2 ** 20;
  const client = new pg.Client({ connectionString: dbUrl });
  await client.connect();
  try {
    const r = await client.query<{ n: string }>('select pg_database_size(current_database()) as n');
    return Number(r.rows[0]!.n) / 2 ** 20;
  } finally {
    await client.end();
  }
}

/** Submit one job to `s` and wait (with a deadline) until a dispatch pass over the queue has run. */
async function onePass(s: Server): Promise<void> {
  const before = await passes(s);
  await submitRun(s, { jobs: { probe: { runsOn: LABELS, steps: [{ run: 'x' }] } } });
  const until = Date.now() + 120_000;
  while ((await passes(s)) <= before) {
    if (Date.now() > until) throw new Error('no dispatch pass ran after a submit');
    await sleep(20);
  }
}

export async function queued(
  m: number,
  drain: number,
  fleetSize: number,
  cluster?: { url: string; instances: number },
): Promise<QueueFigures> {
  try {
    const k = cluster?.instances ?? 1;
    const dbUrl = cluster ? await freshDatabase(cluster.url, `kici_scale_${m}`) : undefined;
    const servers: Server[] = [];
    for (let i = 0; i < k; i++)
      servers.push(await startServer(HERE(), dbUrl ? { dbUrl, instanceId: `scale-${i}` } : {}));
    // Tokens for the queue's labels: its jobs wait for an agent instead of failing as unroutable.
    const specs: FleetAgentSpec[] = [];
    for (let i = 0; i < fleetSize; i++) {
      const agentId = `drain-${i}`;
      specs.push({ agentId, token: (await mintToken(servers[0]!, agentId, LABELS)).token, labels: LABELS });
    }
    const cpu0 = await Promise.all(servers.map((s) => cpuMs(s.pid)));
    const t0 = performance.now();
    // Runs of 10,000 jobs; one request in flight per instance.
    let next = 0;
    await Promise.all(
      servers.map(async (s) => {
        while (next < m) {
          const n = Math.min(10_000, m - next);
          next += n;
          const jobs = Object.fromEntries(
            Array.from({ length: n }, (_, j) => [`j${j}`, { runsOn: LABELS, steps: [{ run: 'x' }] }]),
          );
          await submitRun(s, { jobs });
          if (next % 100_000 === 0 && m > 100_000)
            process.stderr.write(
              `  … ${next} submitted in ${((performance.now() - t0) / 1000).toFixed(0)} s, RSS ${(
                (await rssBytes(s.pid)) /
                2 ** 20
              ).toFixed(0)} MiB\n`,
            );
        }
      }),
    );
    const submitPerS = m / ((performance.now() - t0) / 1000);
    const cpu1 = await Promise.all(servers.map((s) => cpuMs(s.pid)));
    const submitCpuMsPerJob = cpu1.reduce((a, c, i) => a + c - cpu0[i]!, 0) / m;
    await sleep(2000);
    const rssMiB = (await Promise.all(servers.map((s) => rssBytes(s.pid)))).reduce((a, b) => a + b) / 2 ** 20;
    const store = await storeMiB(servers[0]!, dbUrl);
    const s0 = servers[0]!;
    const listMs = await timed(() => again(() => api(s0, 'GET', '/api/v1/jobs?limit=100')));
    const listQueuedMs = await timed(() =>
      again(() => api(s0, 'GET', '/api/v1/jobs?state=queued&limit=100')),
    );
    // Reconcile: the planning time of passes over the full queue, from each server's counters.
    const perInstance: number[] = [];
    for (const s of servers) {
      const [p0, t] = [await passes(s), await planS(s)];
      for (let i = 0; i < 5; i++) await onePass(s);
      perInstance.push((((await planS(s)) - t) * 1000) / ((await passes(s)) - p0));
    }
    // Said now as well: a later step that fails on a starved host must not lose these.
    process.stderr.write(
      `  ${m} queued: submit ${submitPerS.toFixed(0)} jobs/s (${submitCpuMsPerJob.toFixed(3)} ms CPU/job), ` +
        `store ${store.toFixed(0)} MiB, RSS ${rssMiB.toFixed(0)} MiB, plan ${perInstance.map((p) => p.toFixed(3)).join('+')} ms, ` +
        `pages ${listMs.toFixed(1)} / ${listQueuedMs.toFixed(1)} ms\n`,
    );
    const drainP0 = await Promise.all(servers.map(passes));
    const drainT0 = await Promise.all(servers.map(planS));
    let finished = 0;
    let reached: (() => void) | undefined;
    const target = Math.min(drain, m);
    const all = new Promise<void>((r) => (reached = r));
    const fleets = servers.map(
      (s, j) =>
        new SyntheticFleet(
          specs.filter((_, i) => i % k === j),
          {
            url: s.ws,
            concurrency: 24,
            onDone: () => {
              if (++finished === target) reached?.();
            },
          },
        ),
    );
    const d0 = performance.now();
    await Promise.all(fleets.map((f) => f.start()));
    await all;
    const drainPerS = target / ((performance.now() - d0) / 1000);
    await Promise.all(fleets.map((f) => f.stop()));
    let drainPlanMs = 0;
    for (const [i, s] of servers.entries()) {
      const n = (await passes(s)) - drainP0[i]!;
      if (n > 0) drainPlanMs += (((await planS(s)) - drainT0[i]!) * 1000) / n;
    }
    // A graceful restart of the first instance with the queue (less the drained jobs) still stored.
    await stopServer(s0);
    const r0 = performance.now();
    const restarted = await startServer(HERE(), {
      dir: s0.dir,
      readyWithinMs: 30 * 60_000,
      ...(dbUrl ? { dbUrl, instanceId: 'scale-0' } : {}),
    });
    const restartS = (performance.now() - r0) / 1000;
    const rssAfterRestartMiB = (await rssBytes(restarted.pid)) / 2 ** 20;
    return {
      m,
      instances: k,
      submitPerS,
      submitCpuMsPerJob,
      storeMiB: store,
      rssMiB,
      planMs: perInstance.reduce((a, b) => a + b) / k,
      planMsSum: perInstance.reduce((a, b) => a + b),
      listMs,
      listQueuedMs,
      drainPerS,
      drained: target,
      drainPlanMs,
      restartS,
      rssAfterRestartMiB,
    };
  } finally {
    await stopAll();
  }
}

const HERE = () => new URL('..', import.meta.url).pathname;
