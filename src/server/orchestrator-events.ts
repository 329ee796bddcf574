import type { JobObserver } from '../dispatch/active-job.js';
import type { JobState } from '../store/schema.js';
import type { TypedEvents } from '../util/typed-events.js';

/**
 * What an orchestrator tells listeners in its own process (tests, embedders) as it happens, so
 * they can wait for a change instead of asking for it over and over. Emitted after the change is
 * stored (a settled job's row is final when `job.settled` is heard).
 */
export interface OrchestratorEvents {
  [name: string]: unknown;
  /** A job's agent said it started, and its row now reads as running. */
  'job.started': { jobId: string; agentId: string };
  /** A job reached a final state through this instance (result, timeout, cancel, no backend). */
  'job.settled': { jobId: string; state: JobState };
  /** An agent completed its registration on this instance's socket. */
  'agent.registered': { agentId: string };
  /** A spawn for a job failed; the job stays queued with this as its provisioning error. */
  'spawn.failed': { jobId: string; kind: string; message: string };
  /** This instance gained or lost leadership of the cluster's leader-only work. */
  'leader.changed': { leader: boolean };
  /** A scaler configuration reload finished (`result` as the reload API answers it). */
  'reload.applied': { result: string; problems?: string[] | undefined };
}

/** `inner` (the metrics) told first, then the listeners: a job observer that also emits. */
export function emittingObserver(inner: JobObserver, events: TypedEvents<OrchestratorEvents>): JobObserver {
  return {
    jobStarted: (jobId, agentId, submittedAtMs, nowMs) =>
      inner.jobStarted(jobId, agentId, submittedAtMs, nowMs),
    jobRunningStored(jobId, agentId) {
      inner.jobRunningStored?.(jobId, agentId);
      events.emit('job.started', { jobId, agentId });
    },
    jobFinished(jobId, state, nowMs) {
      inner.jobFinished(jobId, state, nowMs);
      events.emit('job.settled', { jobId, state });
    },
  };
}
