import type { Dispatcher } from '../dispatch/dispatcher.js';
import type { Store } from '../store/index.js';
import type { Clock } from '../util/clock.js';
import { errorMessage } from '../util/errors.js';
import type { Logger } from '../util/logger.js';

export const CANCEL_CHANNEL = 'kici_job_cancel';

export type CancelOutcome =
  | { kind: 'cancelled' }
  /** The owning instance was asked and has not answered within the wait; it will. */
  | { kind: 'requested'; state: string }
  | { kind: 'not-open'; state: string };

export interface RemoteCancelDeps {
  store: Store;
  dispatcher: Dispatcher;
  clock: Clock;
  instanceId: string;
  /** Ids of the instances alive now (this one included). */
  aliveInstances: () => Promise<string[]>;
  /** How long the caller waits for the owner to carry a request out (default 5 s). */
  waitMs?: number;
  log: Logger;
}

const ACTIVE = new Set(['dispatched', 'running']);
const rounds = 3;

/**
 * `POST /api/v1/jobs/:id/cancel` on any instance of a cluster. A job this instance holds is
 * cancelled here; a queued one is settled by a conditional update wherever it was submitted; an
 * active one held by a live peer is handed to that peer through a request on the row plus NOTIFY
 * (only the peer has the agent's socket); one whose owner is dead or stopped is settled here.
 */
export async function cancelAnywhere(
  d: RemoteCancelDeps,
  jobId: string,
  reason = 'cancelled by operator',
): Promise<CancelOutcome> {
  if (await cancelHere(d, jobId, reason)) return { kind: 'cancelled' };
  const now = () => new Date(d.clock.now());
  // A few rounds: the job may move (claimed, adopted) between the read and the conditional write.
  for (let i = 0; i < rounds; i++) {
    const row = await d.store.jobs.get(jobId);
    if (!row) return { kind: 'not-open', state: 'unknown' };
    if (row.state === 'queued') {
      d.dispatcher.queue.remove(jobId);
      if (await d.store.jobs.finish(jobId, 'cancelled', { reason, fromState: 'queued' }, now()))
        return { kind: 'cancelled' };
      continue;
    }
    if (!ACTIVE.has(row.state)) return { kind: 'not-open', state: row.state };
    const owner = row.owner_instance ?? null;
    if ((owner === d.instanceId || owner === null) && (await cancelHere(d, jobId, reason)))
      return { kind: 'cancelled' };
    const alive = owner !== null && owner !== d.instanceId && (await d.aliveInstances()).includes(owner);
    if (!alive) {
      // No live instance holds the agent's socket: settle the row; an agent that comes back is
      // told to stop (the job is no longer active, so no instance takes it over).
      const fields = { reason, ...(owner !== null ? { owner } : {}) };
      if (await d.store.jobs.finish(jobId, 'cancelled', fields, now())) return { kind: 'cancelled' };
      continue;
    }
    if (!(await d.store.jobs.requestCancel(jobId, reason, now()))) continue;
    return awaitOwner(d, jobId);
  }
  const row = await d.store.jobs.get(jobId);
  return { kind: 'requested', state: row?.state ?? 'unknown' };
}

/**
 * Cancel through this instance's dispatcher; true once the row says cancelled. The dispatcher's answer
 * alone is not enough: its write is conditional on the owner, and the job's agent may have moved
 * to a peer (which then carries the request out).
 */
async function cancelHere(d: RemoteCancelDeps, jobId: string, reason: string): Promise<boolean> {
  if ((await d.dispatcher.cancel(jobId, reason)) !== 'cancelled') return false;
  return (await d.store.jobs.get(jobId))?.state === 'cancelled';
}

/** Wait a little for the owner: most requests are carried out within milliseconds. */
async function awaitOwner(d: RemoteCancelDeps, jobId: string): Promise<CancelOutcome> {
  const until = Date.now() + (d.waitMs ?? 5_000);
  for (;;) {
    const row = await d.store.jobs.get(jobId);
    const state = row?.state ?? 'unknown';
    if (state === 'cancelled') return { kind: 'cancelled' };
    if (!ACTIVE.has(state)) return { kind: 'not-open', state };
    if (Date.now() >= until) return { kind: 'requested', state };
    await new Promise((r) => setTimeout(r, 50));
  }
}

/**
 * The owner's half: carry out the cancel requests peers left on this instance's jobs. Run on every
 * `kici_job_cancel` notification and on the shared queue's poll (a lost notification).
 */
export async function applyCancelRequests(d: Omit<RemoteCancelDeps, 'aliveInstances'>): Promise<number> {
  let done = 0;
  for (const req of await d.store.jobs.cancelRequestsFor(d.instanceId)) {
    const reason = req.cancel_reason ?? 'cancelled by operator';
    try {
      // An owned active job is always held in memory (recovered at start, or adopted with its
      // request checked there), so a job not held here is one being taken over right now.
      if ((await d.dispatcher.cancel(req.id, reason)) === 'cancelled') done++;
    } catch (err) {
      d.log.warn({ err: errorMessage(err), jobId: req.id }, 'could not cancel a job a peer asked to cancel');
    }
  }
  return done;
}
