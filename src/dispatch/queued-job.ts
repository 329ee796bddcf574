import type { JobSpec } from '../jobs/run-spec.js';
import type { SeqMap } from './seq-map.js';

/**
 * What a queued job needs in memory: the facts routing, agent fit and caps read. Steps and env stay
 * in the store and come back with the claim, so 100,000 queued jobs do not hold 100,000 scripts.
 */
export type QueuedJobSpec = Pick<JobSpec, 'role'> & Partial<Omit<JobSpec, 'role'>>;

export function routingSpec(spec: JobSpec | QueuedJobSpec): QueuedJobSpec {
  return {
    role: spec.role,
    ...(spec.excludeLabels ? { excludeLabels: spec.excludeLabels } : {}),
    ...(spec.resources ? { resources: spec.resources } : {}),
    ...(spec.container ? { container: spec.container } : {}),
  };
}

export interface QueuedJob {
  id: string;
  runId: string;
  name: string;
  seq: number;
  runsOn: string[];
  spec: QueuedJobSpec;
  createdAtMs: number;
  /** Higher goes first within a label set; unset means 0. */
  priority?: number | undefined;
  /** The team the run belongs to, for fair share; unset is the unnamed owner "". */
  owner?: string | undefined;
  /**
   * Why the job is still waiting, as last decided; shown by `job list` and `scaler explain`. While
   * the job is queued this reads its group's reason, unless the job was given one of its own since.
   */
  waiting?: string;
}

export const prio = (j: QueuedJob) => j.priority ?? 0;
export const ownerOf = (j: QueuedJob) => j.owner ?? '';

/** Jobs in submission (seq) order (seq-map.ts). */
export interface SeqList {
  jobs: SeqMap<QueuedJob>;
}

/** Add a job in seq order: appended, or put in its place when older than the last one added. */
export function pushInOrder(l: SeqList, job: QueuedJob, late?: Map<SeqList, QueuedJob[]>): void {
  const last = l.jobs.last;
  if (last && last.seq > job.seq) {
    // Several at once (a batch from the store): placed together, one sort for the batch.
    const batch = late?.get(l);
    if (batch) return void batch.push(job);
    if (late) return void late.set(l, [job]);
    l.jobs.place([job]);
  } else l.jobs.append(job);
}

export function groupKey(job: QueuedJob): string {
  const role = job.spec.role ?? 'execution';
  const image = job.spec.container?.image ?? '';
  const exclude = [...new Set((job.spec.excludeLabels ?? []).map((l) => l.trim().toLowerCase()))].sort();
  // Jobs of one group must be interchangeable for routing, agent fit and caps, so everything that
  // decides those is in the key. JSON, not a joined string: a label may itself contain ',' or '|'.
  return JSON.stringify([job.runsOn, role, image, exclude, job.spec.resources ?? null]);
}
