/**
 * The what-if simulator over a synthetic year of a 200-developer team: about 2,000,000 jobs on
 * working days (a morning and an afternoon peak), over four label sets of two scalers with caps and
 * a warm pool, replayed through the scaler's decision core on a virtual clock. Target: under 60 s.
 */
import { scalerFileSchema } from '../dist/config/index.js';
import { runSimulation } from '../dist/scaler/sim/report.js';
import type { TraceJob } from '../dist/scaler/sim/trace.js';
import type { BenchResult } from './stats.ts';

const DEVELOPERS = 200;
const JOBS_PER_DEV_PER_DAY = 38;
const DAY = 86_400_000;

/** Deterministic pseudo-random numbers (mulberry32), so every run replays the same year. */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const SETS: { labels: string[]; share: number; meanRunMs: number }[] = [
  { labels: ['linux', 'small'], share: 0.55, meanRunMs: 90_000 },
  { labels: ['linux', 'large'], share: 0.25, meanRunMs: 300_000 },
  { labels: ['docker'], share: 0.15, meanRunMs: 150_000 },
  { labels: ['linux', 'gpu'], share: 0.05, meanRunMs: 600_000 },
];

export function syntheticYear(): TraceJob[] {
  const r = rng(20261203);
  const jobs: TraceJob[] = [];
  const start = Date.UTC(2026, 0, 5);
  for (let d = 0; d < 364; d++) {
    if (d % 7 >= 5) continue; // weekends are quiet
    const n = DEVELOPERS * JOBS_PER_DEV_PER_DAY * (0.8 + 0.4 * r());
    const day: TraceJob[] = [];
    for (let i = 0; i < n; i++) {
      // Two peaks: 10:00 and 15:00, spread by an hour or two.
      const hour = (r() < 0.5 ? 10 : 15) + (r() + r() + r() - 1.5) * 2.5;
      const u = r();
      let acc = 0;
      const set = SETS.find((s) => (acc += s.share) >= u) ?? SETS[0]!;
      day.push({
        submitMs: start + d * DAY + Math.max(0, hour) * 3_600_000,
        labels: set.labels,
        runMs: Math.round(-Math.log(1 - r()) * set.meanRunMs),
        queueWaitMs: null,
      });
    }
    day.sort((a, b) => a.submitMs - b.submitMs);
    jobs.push(...day);
  }
  return jobs;
}

export const BENCH_CONFIG = {
  version: 1,
  globalMaxAgents: 400,
  scalers: [
    {
      name: 'metal',
      type: 'bare-metal',
      maxAgents: 300,
      resourceCap: { maxCpu: 900 },
      warmPool: { enabled: true, size: 10 },
      labelSets: [
        { labels: ['linux', 'small'], binaryPath: '/opt/kici/agent', resources: { requests: { cpus: 2 } } },
        { labels: ['linux', 'large'], binaryPath: '/opt/kici/agent', resources: { requests: { cpus: 8 } } },
        { labels: ['linux', 'gpu'], binaryPath: '/opt/kici/agent', resources: { requests: { cpus: 4 } } },
      ],
    },
    {
      name: 'ct',
      type: 'container',
      maxAgents: 120,
      labelSets: [{ labels: ['docker'], image: 'kici/agent' }],
    },
  ],
};

export async function benchSimulate(): Promise<BenchResult> {
  const t0 = performance.now();
  const trace = syntheticYear();
  const built = performance.now() - t0;
  const config = scalerFileSchema.parse(BENCH_CONFIG);
  const t1 = performance.now();
  const report = runSimulation(config, trace, { spawnMs: { 'bare-metal': 1500, container: 4000 } });
  const ms = performance.now() - t1;
  const small = report.pools.find((p) => p.key === 'metal/linux,small');
  return {
    name: `simulate: a year of ${DEVELOPERS} developers (${(trace.length / 1e6).toFixed(2)}M jobs)`,
    value: ms / 1000,
    unit: 's',
    target: 'under 60 s',
    pass: ms < 60_000,
    detail: `${Math.round(trace.length / (ms / 1000)).toLocaleString('en')} jobs/s; trace built in ${(built / 1000).toFixed(1)} s; peak ${report.totals.peakAgents} agents, ${report.totals.agentHours.toFixed(0)} agent-hours; linux,small wait p95 ${small?.waitP95Ms ?? 0} ms`,
  };
}
