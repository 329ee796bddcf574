/** What the simulator counts per scaler label set, and the figures a report shows from it. */

export interface PoolCounters {
  /** `scaler/labelSetKey`. */
  key: string;
  scalerName: string;
  labelSetKey: string;
  waits: number[];
  spawns: number;
  warmSpawns: number;
  agents: number;
  peakAgents: number;
  cpus: number;
  memBytes: number;
  peakCpus: number;
  peakMemBytes: number;
  agentMs: number;
  /** Jobs that waited while a cap refused a spawn for their label set. */
  capDelayed: number;
}

export function newCounters(scalerName: string, labelSetKey: string): PoolCounters {
  return {
    key: `${scalerName}/${labelSetKey}`,
    scalerName,
    labelSetKey,
    waits: [],
    spawns: 0,
    warmSpawns: 0,
    agents: 0,
    peakAgents: 0,
    cpus: 0,
    memBytes: 0,
    peakCpus: 0,
    peakMemBytes: 0,
    agentMs: 0,
    capDelayed: 0,
  };
}

export interface PoolReport {
  key: string;
  scaler: string;
  labelSet: string;
  jobs: number;
  waitP50Ms: number;
  waitP95Ms: number;
  waitP99Ms: number;
  peakAgents: number;
  peakCpus: number;
  peakMemoryBytes: number;
  spawns: number;
  warmSpawns: number;
  capDelayedJobs: number;
  agentHours: number;
  cost?: number;
}

/** Nearest-rank percentile of an ascending array (0 when empty). */
export function percentile(sorted: ArrayLike<number>, p: number): number {
  if (sorted.length === 0) return 0;
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length - 1, Math.max(0, rank - 1))]!;
}

export function sortedCopy(values: readonly number[]): Float64Array {
  return Float64Array.from(values).sort();
}

const round = (n: number, d = 3) => Math.round(n * 10 ** d) / 10 ** d;

export function reportPool(c: PoolCounters, costPerHour?: number): PoolReport {
  const w = sortedCopy(c.waits);
  const hours = c.agentMs / 3_600_000;
  const r: PoolReport = {
    key: c.key,
    scaler: c.scalerName,
    labelSet: c.labelSetKey,
    jobs: w.length,
    waitP50Ms: round(percentile(w, 50), 1),
    waitP95Ms: round(percentile(w, 95), 1),
    waitP99Ms: round(percentile(w, 99), 1),
    peakAgents: c.peakAgents,
    peakCpus: round(c.peakCpus),
    peakMemoryBytes: c.peakMemBytes,
    spawns: c.spawns,
    warmSpawns: c.warmSpawns,
    capDelayedJobs: c.capDelayed,
    agentHours: round(hours),
  };
  if (costPerHour !== undefined) r.cost = round(hours * costPerHour, 2);
  return r;
}
