/**
 * What ProvisionBackoff (backoff.ts) is told and answers: a failure's class, the state after a
 * failure, a label set's streak, a check, a snapshot row and the record of a lift. The planner
 * (plan.ts) and the decision (decide.ts) name these for the backoff they are handed as functions.
 */

export interface BackoffError {
  kind: string;
  message: string;
}

export interface BackoffState {
  consecutive: number;
  deferUntilMs: number;
  delayMs: number;
  failingConsistently: boolean;
  /** False when this report was a duplicate (agent already counted) and changed nothing. */
  counted: boolean;
  /** This failure deferred further launches (0 delay otherwise). */
  armed: boolean;
  /** This failure made the streak reach the limit: the one report to log "failing consistently". */
  becameConsistent: boolean;
}

/** What a label set's streak looks like while it does not block (for explain and status). */
export interface BackoffStreak {
  consecutive: number;
  lastError?: BackoffError;
}

/** The last time a label set's backoff was lifted before it ran out, and by whom (shown in status). */
export interface BackoffLift {
  scalerName: string;
  labelSetKey: string;
  by: 'reload' | 'operator';
  atMs: number;
  /** The streak the lift ended. */
  consecutive: number;
  /** An operator's lift: the access token that asked (null for one without a name). */
  requestedBy?: string | null;
  /** An operator's lift: the instance the request went to (it may have reached this one from there). */
  via?: string;
}

/** How a lift came about: what `clear` records of it. */
export type BackoffLiftCause = Omit<BackoffLift, 'scalerName' | 'labelSetKey' | 'consecutive'>;

export type BackoffCheck =
  | { blocked: false }
  | { blocked: true; retryAfterMs: number; consecutive: number; lastError?: BackoffError; reason: string };

export interface BackoffSnapshotEntry {
  key: string;
  scalerName: string;
  labelSetKey: string;
  consecutive: number;
  deferUntilMs: number;
  lastError?: BackoffError;
}
