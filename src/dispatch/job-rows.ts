import { randomBytes } from 'node:crypto';
import type { JobSpec } from '../jobs/run-spec.js';
import type { AssignedJob } from '../protocol/messages.js';
import type { JobRow } from '../store/index.js';
import { routingSpec, type QueuedJob } from './job-queue.js';

/** A run or job id: a one-letter prefix and 48 random bits. */
export const newId = (prefix: string) => `${prefix}-${randomBytes(6).toString('hex')}`;

/**
 * What a wake-up of the shared queue says changed: rows queued from a place in the queue (seq) on,
 * and jobs queued again by id. No hint at all asks for a full re-read.
 */
export interface ResyncHint {
  fromSeq?: number | undefined;
  ids?: readonly string[] | undefined;
}

/** A stored job as the queue holds it: its routing facts only (the steps come back with the claim). */
export function toQueued(row: JobRow): QueuedJob {
  return {
    id: row.id,
    runId: row.run_id,
    name: row.name,
    seq: Number(row.seq),
    runsOn: row.runs_on,
    spec: routingSpec(row.spec as JobSpec),
    createdAtMs: row.created_at.getTime(),
    ...(row.priority ? { priority: row.priority } : {}),
    ...(row.owner ? { owner: row.owner } : {}),
    ...(row.last_provisioning_error ? { waiting: row.last_provisioning_error } : {}),
  };
}

/** What an agent is sent for a claimed job: the steps named, and only the fields that are set. */
export function toAssigned(job: QueuedJob, spec: JobSpec, sealedEnv?: Record<string, string>): AssignedJob {
  return {
    id: job.id,
    runId: job.runId,
    name: job.name,
    steps: spec.steps.map((s, i) => ({
      name: s.name ?? `step ${i + 1}`,
      run: s.run,
      ...(s.env ? { env: s.env } : {}),
      ...(s.timeoutSeconds ? { timeoutSeconds: s.timeoutSeconds } : {}),
    })),
    env: { ...spec.env, ...sealedEnv },
    ...(spec.timeoutSeconds ? { timeoutSeconds: spec.timeoutSeconds } : {}),
    ...(spec.container ? { container: spec.container } : {}),
  };
}
