import type { OrchestratorMessage } from '../protocol/messages.js';

export type AgentCloseReason = 'heartbeat-timeout' | 'job-complete';

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

/**
 * One registered agent connection, as the rest of the orchestrator sees it: its facts are read-only,
 * and what happens to it is told through the intent methods below. The connection's own code, the
 * claims and the registry all change it only that way, so the moment an agent goes free is always
 * noted (the idle time that the dispatcher and the agent list report).
 */
class ConnectedAgent {
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
  /** Wall-clock time it connected, for people; `connectedMono` is the same moment for uptime. */
  readonly connectedAtMs: number;
  readonly connectedMono: number;
  /** The token it registered with (`agent token revoke` disconnects whoever holds it). */
  readonly tokenId: string | undefined;
  readonly send: (msg: OrchestratorMessage) => void;
  readonly close: (code: number, reason: string) => void;
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
  /** Monotonic time it last became free (its registration, or the end of its last job). */
  get idleSinceMono(): number {
    return this.#idleSince;
  }
  get draining(): boolean {
    return this.#draining;
  }
  /** When it last spoke: on the wall clock for people, on the monotonic clock for liveness. */
  get lastSeenMs(): number {
    return this.#lastSeenMs;
  }
  get lastSeenMono(): number {
    return this.#lastSeenMono;
  }
  /** Set when the orchestrator closes the socket for a reason the scaler should learn (destroy reason). */
  get closedFor(): AgentCloseReason | undefined {
    return this.#closedFor;
  }
  /** Its token was revoked: it cannot come back, so it is not listed as disconnected. */
  get revoked(): boolean {
    return this.#revoked;
  }

  /** It is given this job (counted toward a single-use agent's one). */
  take(jobId: string): void {
    this.#busy = jobId;
    this.#jobsTaken++;
  }
  /** Its claim took an alternate job (a peer had taken the planned one): busy with that instead. */
  takeInstead(planned: string, won: string): void {
    if (this.#busy === planned) this.#busy = won;
  }
  /** A take that did not hold (the claim or the submit failed): the job is not counted. */
  untake(jobId: string): void {
    this.freeFrom(jobId);
    this.#jobsTaken--;
  }
  /** It is done with this job (or refused it): free, unless it is busy with another. True if it was. */
  freeFrom(jobId: string): boolean {
    if (this.#busy !== jobId) return false;
    this.#busy = undefined;
    this.#idleSince = this.#mono();
    return true;
  }
  /** It reported this job's result, which is not stored yet: nothing else is offered to it meanwhile. */
  holdResult(jobId: string): void {
    this.#busy = jobId;
  }
  /** It reconnected still running this job. */
  resume(jobId: string): void {
    this.#busy = jobId;
    this.#jobsTaken = 1;
  }
  /** Its job was settled while it was away: a single-use agent takes no other. */
  spend(): void {
    this.#jobsTaken = 1;
  }
  /** It is offered no new job (the agent leaves after its current one, or a pool takes it back). */
  drain(): void {
    this.#draining = true;
  }
  /** Its token was revoked. */
  revoke(): void {
    this.#revoked = true;
  }
  /** The orchestrator is closing it for a reason its scaler should learn. */
  closing(reason: AgentCloseReason): void {
    this.#closedFor = reason;
  }
  /** A frame arrived from it: on the monotonic clock, and on the wall clock when given. */
  heard(mono: number, nowMs?: number): void {
    this.#lastSeenMono = mono;
    if (nowMs !== undefined) this.#lastSeenMs = nowMs;
  }
}

/** One registered connection. The socket handler and test harnesses build agents the same way. */
export function newConnectedAgent(a: NewAgent): ConnectedAgent {
  return new ConnectedAgent(a);
}

// Other modules hold agents and read them; only newConnectedAgent makes one.
export type { ConnectedAgent };
