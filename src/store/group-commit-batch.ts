import { candidatesOf, type ClaimRequest } from './claim-candidates.js';
import type { Batch, ClaimRows } from './group-commit-sql.js';

/** What a group commit's batch is made of and how it is read: pure helpers for group-commit.ts. */

/**
 * Claims that a batch carrying results takes along, chosen when the batch goes out (see
 * `GroupCommit.rideOnResults`): the agents those results free get their next jobs in the same
 * statement, so a job's result and the next job's claim cost one commit.
 */
export interface ResultRide {
  claims: ClaimRequest[];
  at: Date;
  owner: string | undefined;
  /** The statement committed: these claims won (job → spec); the others lost. */
  claimed(won: Map<string, unknown>): void;
  /** The statement failed: the claims' outcome is unknown, and the results are retried one by one. */
  failed(err: unknown): void;
}

export const emptyBatch = (): Batch => ({
  running: new Map(),
  steps: new Map(),
  finishes: new Map(),
  noops: [],
});

export function isEmpty(b: Batch): boolean {
  return !b.running.size && !b.steps.size && !b.finishes.size && !b.noops.length;
}

/**
 * The usual batch: no step both ended before and started within the tick, and at most one
 * "running" mark per job. Its parts then touch disjoint rows and fit one statement; anything
 * else takes the ordered transaction (group-commit-ordered.ts).
 */
export function isSimple(b: Batch): boolean {
  for (const s of b.steps.values()) if (s.endBefore && s.start) return false;
  const jobs = new Set<string>();
  for (const r of b.running.values()) {
    if (jobs.has(r.jobId)) return false;
    jobs.add(r.jobId);
  }
  return true;
}

/** Claims as the statement's parallel arrays (one row per claim, its alternates as candidates). */
export function claimRows(r: { claims: ClaimRequest[]; at: Date; owner: string | undefined }): ClaimRows {
  return {
    jobId: r.claims.map((c) => c.jobId),
    agentId: r.claims.map((c) => c.agentId),
    candidates: candidatesOf(r.claims),
    at: r.at.toISOString(),
    owner: r.owner ?? null,
  };
}
