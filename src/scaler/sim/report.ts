import type { ScalerConfig, ScalerEntry } from '../../config/index.js';
import { LatencyProfile, type TimedSample } from './profile.js';
import { tracedDispatchMs, tracedProfile, type TraceSample } from './trace-samples.js';
import { simulate, type SimOptions } from './simulate.js';
import { reportPool, type PoolReport } from './stats.js';
import type { TimelineView } from './timeline.js';
import type { TraceJob } from './trace.js';

/** One config's simulated figures, as `scaler simulate --json` prints them. */
export interface SimReport {
  jobs: { replayed: number; skipped: number; unserved: number };
  spanMs: number;
  pools: PoolReport[];
  totals: {
    peakAgents: number;
    spawns: number;
    warmSpawns: number;
    capDelayedJobs: number;
    agentHours: number;
    cost?: number;
  };
  timeline: TimelineView;
}

export interface RunOptions {
  /**
   * Spawn time per backend type (`container`) or scaler name; a name wins over a type. Given by the
   * person asking, so it wins over the trace's samples.
   */
  spawnMs: Record<string, number>;
  /** Spawn times to fall back on where neither `spawnMs` nor the trace has one (the server's metric). */
  defaultSpawnMs?: Record<string, number>;
  /**
   * The latencies the trace carries (its `spawn`, `release` and `dispatch` lines): each scaler
   * spawns and releases as its real counterpart did at that time, unless a value above is given.
   */
  samples?: TraceSample[];
  /** Cost per agent-hour per label set key or `scaler/labelSet` (the longer key wins). */
  cost?: Record<string, number>;
  agentIdleMs?: number;
  releaseMs?: number;
  dispatchMs?: number;
  /**
   * Latencies observed in the real run, with their moments: the replay then spawns and releases as
   * fast as the host did at that time, not at one mean (a spawn sample wins over `spawnMs`).
   */
  observed?: { spawns?: TimedSample[]; releases?: TimedSample[] };
  timelinePoints?: number;
}

/** The spawn time of one scaler's agents, or a message naming the flag that is missing. */
export function spawnTimeOf(spawnMs: Record<string, number>, e: ScalerEntry): number {
  const v = spawnMs[e.name] ?? spawnMs[e.type];
  if (v === undefined) throw missingSpawn(e);
  return v;
}

/**
 * How one scaler's spawns take their time: a value asked for, the trace's samples over time, the
 * fallback, in that order; an error naming the flag when there is none.
 */
export function spawnSource(o: RunOptions, e: ScalerEntry): number | LatencyProfile {
  const asked = o.spawnMs[e.name] ?? o.spawnMs[e.type];
  if (asked !== undefined) return asked;
  const traced = o.samples && tracedProfile(o.samples, 'spawn', e);
  if (traced) return traced;
  return spawnTimeOf(o.defaultSpawnMs ?? {}, e);
}

function missingSpawn(e: ScalerEntry): Error {
  return new Error(
    `no spawn time for scaler "${e.name}" (type ${e.type}): pass --spawn-ms ${e.type}=<ms> (or ${e.name}=<ms>)`,
  );
}

export function runSimulation(config: ScalerConfig, trace: readonly TraceJob[], o: RunOptions): SimReport {
  const spawns = new LatencyProfile(o.observed?.spawns ?? []);
  const spawnBy = new Map(spawns.size ? [] : config.scalers.map((e) => [e.name, spawnSource(o, e)]));
  const releases = new LatencyProfile(o.observed?.releases ?? []);
  const opts: SimOptions = {
    spawnMs: spawns.size
      ? (_e, now) => spawns.valueAt(now)
      : (e, now) => {
          const src = spawnBy.get(e.name)!;
          return typeof src === 'number' ? src : src.valueAt(now);
        },
  };
  // A release time asked for wins over the trace's; programmatic samples win over both.
  const releaseBy = new Map<string, LatencyProfile>();
  if (o.releaseMs === undefined && o.samples) {
    for (const e of config.scalers) {
      const p = tracedProfile(o.samples, 'release', e);
      if (p) releaseBy.set(e.name, p);
    }
  }
  if (releases.size) opts.releaseAt = (_e, now) => releases.valueAt(now);
  else if (releaseBy.size) opts.releaseAt = (e, now) => releaseBy.get(e.name)?.valueAt(now) ?? 0;
  if (o.agentIdleMs !== undefined) opts.agentIdleMs = o.agentIdleMs;
  if (o.releaseMs !== undefined) opts.releaseMs = o.releaseMs;
  const dispatchMs = o.dispatchMs ?? (o.samples && tracedDispatchMs(o.samples));
  if (dispatchMs !== undefined) opts.dispatchMs = dispatchMs;
  if (o.timelinePoints !== undefined) opts.timelinePoints = o.timelinePoints;
  const raw = simulate(config, trace, opts);
  const pools = raw.pools.map((c) => reportPool(c, o.cost?.[c.key] ?? o.cost?.[c.labelSetKey]));
  const totals: SimReport['totals'] = {
    peakAgents: Math.max(0, ...raw.timeline.view().agents),
    spawns: sum(pools, (p) => p.spawns),
    warmSpawns: sum(pools, (p) => p.warmSpawns),
    capDelayedJobs: sum(pools, (p) => p.capDelayedJobs),
    agentHours: Math.round(sum(pools, (p) => p.agentHours) * 1000) / 1000,
  };
  if (o.cost) totals.cost = Math.round(sum(pools, (p) => p.cost ?? 0) * 100) / 100;
  return {
    jobs: { replayed: raw.replayed, skipped: raw.skipped, unserved: raw.unserved },
    spanMs: raw.endMs - raw.startMs,
    pools,
    totals,
    timeline: raw.timeline.view(),
  };
}

function sum<T>(xs: readonly T[], f: (x: T) => number): number {
  let s = 0;
  for (const x of xs) s += f(x);
  return s;
}

const COLUMNS: [keyof PoolReport, string][] = [
  ['jobs', 'JOBS'],
  ['waitP50Ms', 'WAIT P50'],
  ['waitP95Ms', 'WAIT P95'],
  ['waitP99Ms', 'WAIT P99'],
  ['peakAgents', 'PEAK AGENTS'],
  ['peakCpus', 'PEAK CPU'],
  ['peakMemoryBytes', 'PEAK MEM'],
  ['spawns', 'SPAWNS'],
  ['capDelayedJobs', 'CAP-DELAYED'],
  ['agentHours', 'AGENT-H'],
  ['cost', 'COST'],
];

/** Both configs per label set, with the difference (proposed − current). */
export function renderComparison(proposed: SimReport, current: SimReport | undefined): string {
  const keys = [
    ...new Set([...proposed.pools.map((p) => p.key), ...(current?.pools.map((p) => p.key) ?? [])]),
  ].sort();
  const rows: string[][] = [];
  const header = current
    ? ['LABEL SET', 'METRIC', 'CURRENT', 'PROPOSED', 'DIFF']
    : ['LABEL SET', 'METRIC', 'VALUE'];
  for (const key of keys) {
    const p = proposed.pools.find((x) => x.key === key);
    const c = current?.pools.find((x) => x.key === key);
    if (!(p?.jobs || p?.spawns || p?.warmSpawns || c?.jobs || c?.spawns || c?.warmSpawns)) continue;
    for (const [field, label] of COLUMNS) {
      const pv = p?.[field] as number | undefined;
      const cv = c?.[field] as number | undefined;
      if (pv === undefined && cv === undefined) continue;
      const row = [key, label];
      if (current) row.push(fmt(cv), fmt(pv), diff(cv, pv));
      else row.push(fmt(pv));
      rows.push(row);
    }
  }
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (r: string[]) =>
    r
      .map((v, i) => v.padEnd(widths[i]!))
      .join('  ')
      .trimEnd();
  const out = [line(header), ...rows.map(line)];
  const t = (r: SimReport) =>
    `${r.jobs.replayed} jobs replayed, ${r.jobs.unserved} unserved, peak ${r.totals.peakAgents} agents, ${r.totals.agentHours} agent-hours${r.totals.cost !== undefined ? `, cost ${r.totals.cost}` : ''}`;
  if (current) out.push('', `current:  ${t(current)}`);
  out.push(`${current ? 'proposed: ' : ''}${t(proposed)}`);
  return out.join('\n');
}

function fmt(v: number | undefined): string {
  return v === undefined ? '-' : String(v);
}

function diff(a: number | undefined, b: number | undefined): string {
  if (a === undefined || b === undefined) return '-';
  const d = Math.round((b - a) * 1000) / 1000;
  const pct = a !== 0 ? ` (${d >= 0 ? '+' : ''}${Math.round((d / a) * 100)}%)` : '';
  return `${d > 0 ? '+' : ''}${d}${pct}`;
}
