/**
 * `npm run bench -- scale [--agents 1000,5000,10000] [--queued 100000] [--drain 10000] [--fleet 1000] [--pg url]`:
 * how the orchestrator's cost grows with the fleet and the queue, through a real server (PGlite)
 * and the synthetic fleet (bench/fleet/fleet.ts).
 *
 * - for N idle agents: server RSS per agent, server CPU per heartbeat (the fleet heartbeats every
 *   second during a 10 s window, at the server's interval otherwise), dispatch latency p50/p99 of a job to an idle agent (submit →
 *   `job.assign` at the fleet), and the registration rate;
 * - for M queued jobs: submit rate, store size, RSS, reconcile, list pages, the time the `--fleet`
 *   agents take to drain the first `--drain` jobs, and a restart (bench/scale-queue.ts); with
 *   `--pg <url> [--instances 3]` through several instances on that PostgreSQL, summed.
 */
import { resolve } from 'node:path';
import { SyntheticFleet, type FleetAgentSpec } from './fleet/fleet.ts';
import { api, cpuMs, mintToken, rssBytes, startServer, stopAll, type Server } from './harness.ts';
import { queued } from './scale-queue.ts';
import { median, percentile, type BenchResult } from './stats.ts';

const HERE = resolve(import.meta.dirname, '..');

function flag(name: string, dflt: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 && process.argv[i + 1] ? process.argv[i + 1]! : dflt;
}
// `--queued 0` (or an empty list) skips that part.
const list = (name: string, dflt: string) =>
  flag(name, dflt)
    .split(',')
    .map(Number)
    .filter((n) => n > 0);
const SAMPLES = Math.max(1, Number(flag('samples', '200')));
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function mintMany(s: Server, n: number, prefix: string, labels: string[]): Promise<FleetAgentSpec[]> {
  const out: FleetAgentSpec[] = new Array(n);
  let next = 0;
  const worker = async () => {
    while (next < n) {
      const i = next++;
      const agentId = `${prefix}-${i}`;
      out[i] = { agentId, token: (await mintToken(s, agentId, labels)).token, labels };
    }
  };
  await Promise.all(Array.from({ length: 16 }, worker));
  return out;
}

interface FleetFigures {
  n: number;
  rssPerAgentKiB: number;
  /** The server's whole RSS with the fleet connected: what the 1 GiB target at 10k agents is about. */
  rssMiB: number;
  cpuPerHeartbeatUs: number;
  heartbeatCorePct: number;
  p50: number;
  p99: number;
  max: number;
  samples: number;
  regPerS: number;
}

async function idleFleet(n: number): Promise<FleetFigures> {
  try {
    const s = await startServer(HERE);
    const specs = await mintMany(s, n, 'idle', ['linux', 'fleet']);
    await sleep(1000);
    const rss0 = await rssBytes(s.pid);
    let assigned: ((at: number) => void) | undefined;
    let done: (() => void) | undefined;
    const fleet = new SyntheticFleet(specs, {
      url: s.ws,
      concurrency: 24,
      onAssign: (_a, _j, at) => assigned?.(at),
      onDone: () => done?.(),
    });
    const t0 = performance.now();
    await fleet.start();
    const regPerS = n / ((performance.now() - t0) / 1000);
    await sleep(3000);
    const rss1 = await rssBytes(s.pid);
    // Heartbeats: every agent sends one a second; the server's CPU over the window, per heartbeat.
    // (Registration and dispatch run at the interval the server asks for.)
    for (const a of fleet.agents) a.heartbeatEvery(1000);
    const c0 = await cpuMs(s.pid);
    const w0 = performance.now();
    await sleep(10_000);
    const cpu = (await cpuMs(s.pid)) - c0;
    const beats = n * ((performance.now() - w0) / 1000);
    const perBeatMs = cpu / beats;
    for (const a of fleet.agents) a.heartbeatEvery(undefined);
    // Dispatch latency: one job at a time to one of N idle agents. Enough samples (200 by
    // default) that the p99 is not simply the slowest one.
    const lat: number[] = [];
    for (let i = 0; i < SAMPLES; i++) {
      const got = new Promise<number>((r) => (assigned = r));
      const fin = new Promise<void>((r) => (done = r));
      const t = performance.now();
      await api(s, 'POST', '/api/v1/runs', {
        jobs: { one: { runsOn: ['linux', 'fleet'], steps: [{ run: 'x' }] } },
      });
      lat.push((await got) - t);
      await fin;
    }
    await fleet.stop();
    return {
      n,
      rssPerAgentKiB: (rss1 - rss0) / n / 1024,
      rssMiB: rss1 / 2 ** 20,
      cpuPerHeartbeatUs: perBeatMs * 1000,
      // At the default interval (10 s): N/10 heartbeats a second.
      heartbeatCorePct: ((n / 10) * perBeatMs) / 10,
      p50: median(lat),
      p99: percentile(lat, 99),
      max: Math.max(...lat),
      samples: lat.length,
      regPerS,
    };
  } finally {
    await stopAll();
  }
}

export async function benchScale(): Promise<BenchResult[]> {
  const out: BenchResult[] = [];
  for (const n of list('agents', '1000,5000,10000')) {
    const f = await idleFleet(n);
    const detail =
      // The difference to the server alone can read low, even below zero: its heap may shrink
      // between the two readings (the tokens were minted just before the first).
      `${n} idle agents: server RSS ${f.rssMiB.toFixed(0)} MiB with the fleet (${f.rssPerAgentKiB.toFixed(1)} KiB/agent over the server alone), ${f.cpuPerHeartbeatUs.toFixed(0)} µs CPU/heartbeat ` +
      `(${f.heartbeatCorePct.toFixed(2)} % of a core at the default 10 s interval), dispatch p50 ${f.p50.toFixed(1)} ms ` +
      `p99 ${f.p99.toFixed(1)} ms max ${f.max.toFixed(1)} ms (${f.samples} samples), registration ${f.regPerS.toFixed(0)} agents/s`;
    process.stdout.write(`  ${detail}\n`);
    out.push({
      name: `scale: ${n} idle agents, dispatch p99`,
      value: f.p99,
      unit: 'ms',
      target: 'at most 50 ms at 10k agents',
      pass: f.p99 <= 50,
      detail,
    });
    out.push({
      name: `scale: ${n} idle agents, server RSS`,
      value: f.rssMiB,
      unit: 'MiB',
      target: 'at most 1 GiB at 10k agents',
      pass: f.rssMiB <= 1024,
      detail: `the server's whole RSS with ${n} agents connected`,
    });
  }
  const drain = Number(flag('drain', '10000'));
  const fleetSize = Number(flag('fleet', '1000'));
  // `--pg <url> --instances 3`: the queue on PostgreSQL through that many instances, summed.
  const pgUrl = flag('pg', '');
  const cluster = pgUrl ? { url: pgUrl, instances: Number(flag('instances', '3')) } : undefined;
  for (const m of list('queued', '100000')) {
    const q = await queued(m, drain, fleetSize, cluster);
    const where = cluster ? `${q.instances} instances on PostgreSQL, summed` : 'one instance, embedded store';
    const detail =
      `${m} queued jobs (${where}): submit ${q.submitPerS.toFixed(0)} jobs/s (${q.submitCpuMsPerJob.toFixed(3)} ms server CPU/job), ` +
      `store ${q.storeMiB.toFixed(0)} MiB, RSS ${q.rssMiB.toFixed(0)} MiB; plan of one pass ${q.planMs.toFixed(3)} ms ` +
      `(summed ${q.planMsSum.toFixed(3)} ms); /api/v1/jobs page ${q.listMs.toFixed(1)} ms, queued page ${q.listQueuedMs.toFixed(1)} ms; ` +
      `${fleetSize} agents drained ${q.drained} jobs at ${q.drainPerS.toFixed(0)} jobs/s (all ${m}: ~${(m / q.drainPerS).toFixed(0)} s; ` +
      `plan per pass while draining ${q.drainPlanMs.toFixed(2)} ms); restart to ready ${q.restartS.toFixed(1)} s, ` +
      `RSS after ${q.rssAfterRestartMiB.toFixed(0)} MiB`;
    process.stdout.write(`  ${detail}\n`);
    out.push({
      name: `scale: ${m} queued jobs (${where}), drain rate with ${fleetSize} agents`,
      value: q.drainPerS,
      unit: 'jobs/s',
      target: 'reported',
      pass: Number.isFinite(q.drainPerS),
      detail,
    });
  }
  return out;
}

if (import.meta.main) {
  for (const r of await benchScale()) process.stdout.write(`${JSON.stringify(r)}\n`);
}
