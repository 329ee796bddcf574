/**
 * The agent protocol: JSON messages over one WebSocket (`/ws`). Types only, so the agent can use
 * them without loading a validation library; the server validates what it receives.
 * See docs/protocol.md.
 */
export const PROTOCOL_VERSION = 1;

export type JobResult = 'succeeded' | 'failed' | 'cancelled' | 'timed-out';
export type LogStream = 'stdout' | 'stderr' | 'system';

export interface AssignedStep {
  name: string;
  run: string;
  env?: Record<string, string>;
  timeoutSeconds?: number;
}

export interface AssignedJob {
  id: string;
  runId: string;
  name: string;
  steps: AssignedStep[];
  env: Record<string, string>;
  timeoutSeconds?: number;
  container?: { image: string };
}

// agent -> orchestrator
export interface RegisterMessage {
  type: 'register';
  protocol: number;
  agentId: string;
  token: string;
  labels: string[];
  version?: string;
  hostname?: string;
  /** Set when the agent reconnects while it is still running a job. */
  activeJobId?: string;
  /**
   * Jobs this agent has finished. Informational only: the orchestrator keeps its own count, and a
   * single-use agent that was handed a job takes no other whatever it says here.
   */
  jobsDone?: number;
  /**
   * The session secret from this process's first `register.ack`: a reconnect presents it to prove
   * it is the same agent process. Kept only in the agent's memory.
   */
  session?: string;
}
/**
 * Sent first, instead of `register`, by an agent that holds a one-time claim code and no token
 * (an agent provisioned by a cluster). The answer, `claim.ack`, carries its id and token; the agent
 * then registers with them on the same connection.
 */
export interface ClaimMessage {
  type: 'claim';
  protocol: number;
  code: string;
}
export interface HeartbeatMessage {
  type: 'heartbeat';
}
export interface JobStartedMessage {
  type: 'job.started';
  jobId: string;
}
export interface StepStartedMessage {
  type: 'step.started';
  jobId: string;
  idx: number;
  name: string;
}
export interface LogMessage {
  type: 'log';
  jobId: string;
  idx: number | null;
  stream: LogStream;
  lines: string[];
}
export interface StepFinishedMessage {
  type: 'step.finished';
  jobId: string;
  idx: number;
  exitCode: number | null;
  timedOut: boolean;
  durationMs: number;
}
export interface JobFinishedMessage {
  type: 'job.finished';
  jobId: string;
  result: JobResult;
  exitCode: number | null;
  message?: string;
}
export interface JobRejectedMessage {
  type: 'job.rejected';
  jobId: string;
  reason: string;
}
/** The agent takes no new job: it finishes the current one and leaves (a static agent's SIGTERM). */
export interface AgentDrainingMessage {
  type: 'agent.draining';
}

export type AgentMessage =
  | RegisterMessage
  | ClaimMessage
  | HeartbeatMessage
  | JobStartedMessage
  | StepStartedMessage
  | LogMessage
  | StepFinishedMessage
  | JobFinishedMessage
  | JobRejectedMessage
  | AgentDrainingMessage;

// orchestrator -> agent
export interface RegisterAckMessage {
  type: 'register.ack';
  agentId: string;
  labels: string[];
  scalerManaged: boolean;
  pendingDispatch: boolean;
  warmPool: boolean;
  heartbeatIntervalMs: number;
  /** The job the agent said it was running, when the orchestrator still expects it. */
  resumeJobId?: string;
  /** This orchestrator acknowledges `job.finished` once the result is stored (`job.finished.ack`). */
  acksResults?: boolean;
  /** A new session's secret, sent once; the agent presents it on every reconnect. */
  session?: string;
}
/** The claim code was redeemed: register next with this id, token and labels. */
export interface ClaimAckMessage {
  type: 'claim.ack';
  agentId: string;
  token: string;
  labels: string[];
}
export interface RegisterRejectedMessage {
  type: 'register.rejected';
  code: number;
  reason: string;
}
export interface JobAssignMessage {
  type: 'job.assign';
  job: AssignedJob;
}
export interface JobCancelMessage {
  type: 'job.cancel';
  jobId: string;
  reason: string;
}
export interface HeartbeatAckMessage {
  type: 'heartbeat.ack';
}
/** The job's result is stored (or the job was already settled): the agent may forget it. */
export interface JobFinishedAckMessage {
  type: 'job.finished.ack';
  jobId: string;
}
export interface ShutdownMessage {
  type: 'shutdown';
  reason: string;
}

export type OrchestratorMessage =
  | RegisterAckMessage
  | ClaimAckMessage
  | RegisterRejectedMessage
  | JobAssignMessage
  | JobCancelMessage
  | HeartbeatAckMessage
  | JobFinishedAckMessage
  | ShutdownMessage;

/** WebSocket close codes the orchestrator uses; the agent decides from them whether to retry. */
export const CloseCodes = {
  badMessage: 4400,
  unauthorized: 4401,
  forbidden: 4403,
  duplicate: 4409,
  heartbeatTimeout: 4408,
  /** A token that is valid, but from a registration that cannot prove it is the agent's session. */
  sessionUnproven: 4412,
  shuttingDown: 4503,
  internal: 1011,
} as const;

/** Codes after which retrying with the same credentials cannot succeed. */
export const FATAL_CLOSE_CODES: readonly number[] = [
  CloseCodes.badMessage,
  CloseCodes.unauthorized,
  CloseCodes.forbidden,
];

/** Labels an agent may add at registration beyond its token's scope: facts about its own host. */
export const SELF_REPORTED_PREFIXES = ['kici:os:', 'kici:arch:', 'kici:host:', 'kici:runtime:'] as const;
