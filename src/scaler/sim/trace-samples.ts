import type { ScalerEntry } from '../../config/index.js';
import { LatencyProfile, type TimedSample } from './profile.js';

/**
 * A latency the real run showed, as a trace line with a `kind`: how long a spawn took from its
 * decision to its agent's registration, how long an agent took from its job's end until it was gone
 * (its capacity free for the next spawn), and how long a job took to start once an agent was free
 * for it. The replay follows them over time, per scaler.
 */
export type SampleKind = 'spawn' | 'release' | 'dispatch';

export interface TraceSample {
  kind: SampleKind;
  /** The moment it began, epoch ms: the decision, the job's end, or the agent being free. */
  atMs: number;
  ms: number;
  scaler?: string;
  backend?: string;
  labelSet?: string;
}

/** The JSON field holding each kind's milliseconds. */
export const SAMPLE_FIELD: Record<SampleKind, 'spawnMs' | 'releaseMs' | 'dispatchMs'> = {
  spawn: 'spawnMs',
  release: 'releaseMs',
  dispatch: 'dispatchMs',
};

export const SAMPLE_KINDS = new Set<string>(Object.keys(SAMPLE_FIELD));

/** Parse one sample line (already JSON): every problem is given back as "field: what is wrong". */
export function parseSample(
  o: Record<string, unknown>,
  fail: (field: string, want: string) => never,
): TraceSample {
  const kind = o.kind as SampleKind;
  const field = SAMPLE_FIELD[kind];
  const known = new Set(['kind', 'at', 'scaler', 'backend', 'labelSet', field]);
  for (const k of Object.keys(o)) {
    if (!known.has(k)) fail(k, `is not a field of a "${kind}" record (known: ${[...known].join(', ')})`);
  }
  let atMs: number;
  if (typeof o.at === 'number' && Number.isFinite(o.at)) atMs = o.at;
  else if (typeof o.at === 'string' && Number.isFinite(Date.parse(o.at))) atMs = Date.parse(o.at);
  else return fail('at', 'is required: an ISO 8601 time or epoch milliseconds');
  const v = o[field];
  if (typeof v !== 'number' || !Number.isFinite(v) || v < 0)
    return fail(field, 'is required: a number of milliseconds >= 0');
  const s: TraceSample = { kind, atMs, ms: v };
  for (const f of ['scaler', 'backend', 'labelSet'] as const) {
    const x = o[f];
    if (x === undefined || x === null) continue;
    if (typeof x !== 'string') return fail(f, 'must be a string');
    s[f] = x;
  }
  return s;
}

/** One sample as a trace line, in the documented field order. */
export function formatSampleLine(s: TraceSample): string {
  const out: Record<string, unknown> = { kind: s.kind, at: new Date(s.atMs).toISOString() };
  if (s.scaler !== undefined) out.scaler = s.scaler;
  if (s.backend !== undefined) out.backend = s.backend;
  if (s.labelSet !== undefined) out.labelSet = s.labelSet;
  out[SAMPLE_FIELD[s.kind]] = s.ms;
  return JSON.stringify(out);
}

/**
 * The traced latencies one scaler of a config follows: its own samples when the trace has them,
 * else those of its backend type (a proposed config may name its scalers differently).
 */
export function tracedProfile(
  samples: readonly TraceSample[],
  kind: SampleKind,
  e: ScalerEntry,
): LatencyProfile | undefined {
  const pick = (f: (s: TraceSample) => boolean): TimedSample[] =>
    samples.filter((s) => s.kind === kind && f(s)).map((s) => ({ atMs: s.atMs, ms: s.ms }));
  let chosen = pick((s) => s.scaler === e.name && (s.backend === undefined || s.backend === e.type));
  if (chosen.length === 0) chosen = pick((s) => s.backend === e.type);
  return chosen.length ? new LatencyProfile(chosen) : undefined;
}

/** The mean hand-over time over the trace's dispatch samples; undefined when it has none. */
export function tracedDispatchMs(samples: readonly TraceSample[]): number | undefined {
  let sum = 0;
  let n = 0;
  for (const s of samples) {
    if (s.kind !== 'dispatch') continue;
    sum += s.ms;
    n++;
  }
  return n ? Math.round(sum / n) : undefined;
}
