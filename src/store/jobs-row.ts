/**
 * The jobs table as the repository's queries share it: the row type, a job as submitted, and the
 * state groups they filter by. Kept apart so the query modules and JobsRepo can all use them
 * without importing each other.
 */
import type { Selectable } from 'kysely';
import type { JobState, JobsTable } from './schema.js';

export type JobRow = Selectable<JobsTable>;

export interface NewJob {
  id: string;
  name: string;
  runsOn: string[];
  spec: unknown;
  /** Claimed by an idle agent as it is submitted: stored already dispatched, in the same commit. */
  claim?: { agentId: string; owner?: string | undefined } | undefined;
  priority?: number;
  owner?: string | null;
}

/** Jobs an agent holds. */
export const ACTIVE: JobState[] = ['dispatched', 'running'];

/** Jobs not yet settled: waiting for an agent, or held by one. */
export const OPEN: JobState[] = ['queued', 'dispatched', 'running'];
