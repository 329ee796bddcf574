import type { OrchestratorMessage } from '../protocol/messages.js';

export type AgentCloseReason = 'heartbeat-timeout' | 'job-complete';

/**
 * One registered agent connection, as the rest of the orchestrator sees it: its facts are read-only,
 * and what happens to it is told through the intent methods below. The connection's own code, the
 * claims and the registry all change it only that way, so the moment an agent goes free is always
 * noted (the idle time that the dispatcher and the agent list report).
 */
export interface ConnectedAgent {
  readonly id: string;
  readonly kind: 'static' | 'scaler';
  readonly labels: ReadonlySet<string>;
  readonly labelList: readonly string[];
  /** Labels a job must carry to run here (mandatoryLabels and platform taints). */
  readonly gate: readonly string[];
  readonly scalerName?: string;
  /** The job a scaler started this agent for (it may run that job even where the rules say no). */
  readonly boundJobId?: string;
  /** Single-use agents take exactly one job. */
  readonly ephemeral: boolean;
  /** The version it reported at registration (absent for old or foreign agents). */
  readonly version?: string;
  /** The host name it reported at registration (absent for old or foreign agents). */
  readonly hostname?: string;
  readonly jobsTaken: number;
  readonly busyJobId: string | undefined;
  /** Monotonic time it last became free (its registration, or the end of its last job). */
  readonly idleSinceMono: number;
  readonly draining: boolean;
  /** Wall-clock stamps, for people: when it connected and last spoke. */
  readonly connectedAtMs: number;
  readonly lastSeenMs: number;
  /** The same two moments on the monotonic clock: liveness and uptime are measured on these. */
  readonly connectedMono: number;
  readonly lastSeenMono: number;
  /** Set when the orchestrator closes the socket for a reason the scaler should learn (destroy reason). */
  readonly closedFor: AgentCloseReason | undefined;
  /** The token it registered with (`agent token revoke` disconnects whoever holds it). */
  readonly tokenId: string | undefined;
  /** Its token was revoked: it cannot come back, so it is not listed as disconnected. */
  readonly revoked: boolean;
  send(msg: OrchestratorMessage): void;
  close(code: number, reason: string): void;

  /** It is given this job (counted toward a single-use agent's one). */
  take(jobId: string): void;
  /** A take that did not hold (the claim or the submit failed): the job is not counted. */
  untake(jobId: string): void;
  /** It is done with this job (or refused it): free, unless it is busy with another. True if it was. */
  freeFrom(jobId: string): boolean;
  /** It reported this job's result, which is not stored yet: nothing else is offered to it meanwhile. */
  holdResult(jobId: string): void;
  /** It reconnected still running this job. */
  resume(jobId: string): void;
  /** Its job was settled while it was away: a single-use agent takes no other. */
  spend(): void;
  /** It is offered no new job (the agent leaves after its current one, or a pool takes it back). */
  drain(): void;
  /** Its token was revoked. */
  revoke(): void;
  /** The orchestrator is closing it for a reason its scaler should learn. */
  closing(reason: AgentCloseReason): void;
  /** A frame arrived from it: on the monotonic clock, and on the wall clock when given. */
  heard(mono: number, nowMs?: number): void;
}

export interface NewAgent {
  id: string;
  labels: string[];
  /** The scaler's registration answer; null for a static agent. */
  scaled: { gate: string[]; scalerName: string; boundJobId?: string | undefined } | null;
  /** Jobs the agent reports it already finished (a reconnecting single-use agent takes no other). */
  jobsDone?: number | undefined;
  version?: string | undefined;
  hostname?: string | undefined;
  tokenId?: string | undefined;
  nowMs: number;
  /** The monotonic reading at the same moment (default: nowMs, for callers with one clock). */
  monoMs?: number | undefined;
  send: ConnectedAgent['send'];
  close: ConnectedAgent['close'];
  /** The monotonic clock, read when the agent becomes free (default: performance.now). */
  mono?: () => number;
}

class LiveAgent implements ConnectedAgent {
  readonly id: string;
  readonly kind: 'static' | 'scaler';
  readonly labels: ReadonlySet<string>;
  readonly labelList: readonly string[];
  readonly gate: readonly string[];
  readonly scalerName?: string;
  readonly boundJobId?: string;
  readonly ephemeral: boolean;
  readonly version?: string;
  readonly hostname?: string;
  readonly connectedAtMs: number;
  readonly connectedMono: number;
  readonly tokenId: string | undefined;
  readonly send: ConnectedAgent['send'];
  readonly close: ConnectedAgent['close'];
  #jobsTaken: number;
  #busy: string | undefined;
  #idleSince: number;
  #draining = false;
  #lastSeenMs: number;
  #lastSeenMono: number;
  #closedFor: AgentCloseReason | undefined;
  #revoked = false;
  readonly #mono: () => number;

  constructor(a: NewAgent) {
    this.id = a.id;
    this.kind = a.scaled ? 'scaler' : 'static';
    this.labels = new Set(a.labels);
    this.labelList = a.labels;
    this.gate = a.scaled?.gate ?? [];
    if (a.scaled) this.scalerName = a.scaled.scalerName;
    if (a.scaled?.boundJobId) this.boundJobId = a.scaled.boundJobId;
    this.ephemeral = a.scaled !== null;
    if (a.version !== undefined) this.version = a.version;
    if (a.hostname !== undefined) this.hostname = a.hostname;
    this.tokenId = a.tokenId;
    this.#jobsTaken = a.jobsDone ?? 0;
    this.connectedAtMs = this.#lastSeenMs = a.nowMs;
    this.connectedMono = this.#lastSeenMono = this.#idleSince = a.monoMs ?? a.nowMs;
    this.#mono = a.mono ?? (() => performance.now());
    this.send = a.send;
    this.close = a.close;
  }

  get jobsTaken(): number {
    return this.#jobsTaken;
  }
  get busyJobId(): string | undefined {
    return this.#busy;
  }
  get idleSinceMono(): number {
    return this.#idleSince;
  }
  get draining(): boolean {
    return this.#draining;
  }
  get lastSeenMs(): number {
    return this.#lastSeenMs;
  }
  get lastSeenMono(): number {
    return this.#lastSeenMono;
  }
  get closedFor(): AgentCloseReason | undefined {
    return this.#closedFor;
  }
  get revoked(): boolean {
    return this.#revoked;
  }

  take(jobId: string): void {
    this.#busy = jobId;
    this.#jobsTaken++;
  }
  untake(jobId: string): void {
    this.freeFrom(jobId);
    this.#jobsTaken--;
  }
  freeFrom(jobId: string): boolean {
    if (this.#busy !== jobId) return false;
    this.#busy = undefined;
    this.#idleSince = this.#mono();
    return true;
  }
  holdResult(jobId: string): void {
    this.#busy = jobId;
  }
  resume(jobId: string): void {
    this.#busy = jobId;
    this.#jobsTaken = 1;
  }
  spend(): void {
    this.#jobsTaken = 1;
  }
  drain(): void {
    this.#draining = true;
  }
  revoke(): void {
    this.#revoked = true;
  }
  closing(reason: AgentCloseReason): void {
    this.#closedFor = reason;
  }
  heard(mono: number, nowMs?: number): void {
    this.#lastSeenMono = mono;
    if (nowMs !== undefined) this.#lastSeenMs = nowMs;
  }
}

/** One registered connection. The socket handler and test harnesses build agents the same way. */
export function newConnectedAgent(a: NewAgent): ConnectedAgent {
  return new LiveAgent(a);
}
