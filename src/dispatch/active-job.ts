/**
 * One active job's record, who hears of jobs starting and finishing, and what the ActiveJobs map
 * (active-jobs.ts) is built with: apart from the class, so the options and observers that only name
 * these types do not import it.
 */
import type { JobSpec } from '../jobs/run-spec.js';
import type { JobState, Store } from '../store/index.js';
import type { GroupCommit } from '../store/group-commit.js';
import type { Clock, TimerHandle } from '../util/clock.js';
import type { Logger } from '../util/logger.js';
import type { AgentRegistry } from './agent-registry.js';
import type { JobQueue, QueuedJob } from './job-queue.js';
import type { LogSink } from './log-sink.js';

export interface ActiveJob {
  job: QueuedJob;
  /** The full spec, loaded with the claim (queued jobs keep only their routing facts in memory). */
  spec: JobSpec;
  agentId: string;
  state: 'dispatched' | 'running';
  /** The agent went away; the job waits this long for it to come back before it is settled. */
  orphanTimer?: TimerHandle | undefined;
  timeoutTimer?: TimerHandle | undefined;
  /** The result being written; a second report for the job waits for it instead of writing again. */
  settling?: Promise<boolean>;
  /** Its agent reported the result (so the agent is free once it is stored). */
  reported?: boolean;
}

export interface JobObserver {
  jobStarted(jobId: string, agentId: string, submittedAtMs: number, nowMs: number): void;
  jobFinished(jobId: string, result: JobState, nowMs: number): void;
  /** The job's running mark is stored (it reads as running from now on). */
  jobRunningStored?(jobId: string, agentId: string): void;
}

export interface ActiveJobsDeps {
  store: Store;
  clock: Clock;
  log: Logger;
  writes: GroupCommit;
  logs: LogSink;
  queue: JobQueue;
  registry: AgentRegistry;
  observer?: JobObserver | undefined;
  /** Several orchestrators on one database: results are stamped with this owner. */
  instanceId?: string | undefined;
  /** How long a job waits for its agent to reconnect. */
  reconnectGraceMs: number;
  /** Extra time past a job's own timeout before the orchestrator settles it itself. */
  timeoutBackstopMs: number;
  /** Look for work again: an agent came free or a job went back to the queue. */
  pump: () => void;
  stopped: () => boolean;
}
