import { resourceRequestSchema, type ResourceRequest } from '../../config/index.js';
import { parseSample, SAMPLE_KINDS, type TraceSample } from './trace-samples.js';

/**
 * One job of a trace (a line of JSONL): what the simulator replays. Only `submit`, `labels` and
 * `runMs` drive the replay; the observed fields (queue wait, result, backend) are kept so a report
 * can put the simulated figures next to what really happened.
 */
export interface TraceJob {
  id?: string;
  /** Submission time, epoch ms. */
  submitMs: number;
  /** The job's `runsOn`, as written. */
  labels: string[];
  resources?: ResourceRequest | undefined;
  /** How long the job ran; null when it never started (it is then not replayed). */
  runMs: number | null;
  /** Observed wait from submission to start (null when it never started, or unknown). */
  queueWaitMs: number | null;
  result?: string;
  backend?: string;
  scaler?: string;
  priority?: number;
  owner?: string;
}

export class TraceError extends Error {}

const KNOWN = new Set([
  'kind',
  'id',
  'submit',
  'labels',
  'resources',
  'runMs',
  'queueWaitMs',
  'result',
  'backend',
  'scaler',
  'priority',
  'owner',
]);

/** A whole trace: its jobs, sorted, and the latencies observed in the run (lines with a `kind`). */
export interface TraceFile {
  jobs: TraceJob[];
  samples: TraceSample[];
}

/** Parse a JSONL trace's jobs (latency lines are checked, then left out). */
export function parseTrace(text: string, file = 'trace'): TraceJob[] {
  return parseTraceFile(text, file).jobs;
}

/** Parse a JSONL trace; every problem names the file, the line and the field. */
export function parseTraceFile(text: string, file = 'trace'): TraceFile {
  const jobs: TraceJob[] = [];
  const samples: TraceSample[] = [];
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!.trim();
    if (line === '' || line.startsWith('#')) continue;
    const where = `${file}:${i + 1}`;
    const o = jsonObject(line, where);
    if (o.kind === undefined || o.kind === 'job') jobs.push(traceJobOf(o, where));
    else if (typeof o.kind === 'string' && SAMPLE_KINDS.has(o.kind)) {
      samples.push(
        parseSample(o, (field, want) => {
          throw new TraceError(`${where}: field "${field}" ${want}`);
        }),
      );
    } else {
      throw new TraceError(
        `${where}: field "kind" must be one of job, ${[...SAMPLE_KINDS].join(', ')} (a job line may omit it)`,
      );
    }
  }
  return { jobs: sortTrace(jobs), samples };
}

/** Stable order by submission time: the replay reads jobs in this order. */
export function sortTrace(jobs: TraceJob[]): TraceJob[] {
  let sorted = true;
  for (let i = 1; i < jobs.length && sorted; i++) sorted = jobs[i - 1]!.submitMs <= jobs[i]!.submitMs;
  return sorted
    ? jobs
    : jobs
        .map((j, i) => ({ j, i }))
        .sort((a, b) => a.j.submitMs - b.j.submitMs || a.i - b.i)
        .map((x) => x.j);
}

export function parseTraceLine(line: string, where: string): TraceJob {
  return traceJobOf(jsonObject(line, where), where);
}

function jsonObject(line: string, where: string): Record<string, unknown> {
  let raw: unknown;
  try {
    raw = JSON.parse(line);
  } catch (err) {
    throw new TraceError(`${where}: not a JSON object (${(err as Error).message})`);
  }
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) {
    throw new TraceError(`${where}: each line must be a JSON object, one job per line`);
  }
  return raw as Record<string, unknown>;
}

function traceJobOf(o: Record<string, unknown>, where: string): TraceJob {
  for (const k of Object.keys(o)) {
    if (!KNOWN.has(k))
      throw new TraceError(`${where}: unknown field "${k}" (known: ${[...KNOWN].join(', ')})`);
  }
  const fail = (field: string, want: string): never => {
    throw new TraceError(`${where}: field "${field}" ${want}`);
  };
  let submitMs: number;
  if (typeof o.submit === 'number' && Number.isFinite(o.submit)) submitMs = o.submit;
  else if (typeof o.submit === 'string' && Number.isFinite(Date.parse(o.submit)))
    submitMs = Date.parse(o.submit);
  else return fail('submit', 'is required: an ISO 8601 time ("2026-12-03T08:00:00Z") or epoch milliseconds');
  if (
    !Array.isArray(o.labels) ||
    o.labels.length === 0 ||
    !o.labels.every((l) => typeof l === 'string' && l)
  ) {
    return fail('labels', "is required: a non-empty array of label strings (the job's runsOn)");
  }
  const ms = (field: 'runMs' | 'queueWaitMs'): number | null => {
    const v = o[field];
    if (v === undefined || v === null) return null;
    if (typeof v !== 'number' || !Number.isFinite(v) || v < 0)
      return fail(field, 'must be a number of milliseconds >= 0, or null');
    return v;
  };
  const job: TraceJob = {
    submitMs,
    labels: o.labels as string[],
    runMs: ms('runMs'),
    queueWaitMs: ms('queueWaitMs'),
  };
  if (o.resources !== undefined && o.resources !== null) {
    const r = resourceRequestSchema.safeParse(o.resources);
    if (!r.success) {
      return fail(
        'resources',
        `is not a resources block: ${r.error.issues.map((x) => `${x.path.join('.') || '(top)'}: ${x.message}`).join('; ')}`,
      );
    }
    job.resources = r.data;
  }
  for (const f of ['id', 'result', 'backend', 'scaler', 'owner'] as const) {
    const v = o[f];
    if (v === undefined || v === null) continue;
    if (typeof v !== 'string') return fail(f, 'must be a string');
    job[f] = v;
  }
  if (o.priority !== undefined && o.priority !== null) {
    if (!Number.isInteger(o.priority)) return fail('priority', 'must be an integer');
    job.priority = o.priority as number;
  }
  return job;
}

/** One line of a trace file, in the documented field order. */
export function formatTraceLine(j: TraceJob): string {
  const out: Record<string, unknown> = {};
  if (j.id !== undefined) out.id = j.id;
  out.submit = new Date(j.submitMs).toISOString();
  out.labels = j.labels;
  if (j.resources) out.resources = j.resources;
  out.queueWaitMs = j.queueWaitMs;
  out.runMs = j.runMs;
  if (j.result !== undefined) out.result = j.result;
  if (j.backend !== undefined) out.backend = j.backend;
  if (j.scaler !== undefined) out.scaler = j.scaler;
  if (j.priority !== undefined) out.priority = j.priority;
  if (j.owner !== undefined) out.owner = j.owner;
  return JSON.stringify(out);
}
