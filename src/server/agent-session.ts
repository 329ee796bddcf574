import type { ConnectedAgent } from '../dispatch/agent-registry.js';
import type { Dispatcher } from '../dispatch/dispatcher.js';
import { LIMITS } from '../protocol/limits.js';
import { CloseCodes, type OrchestratorMessage } from '../protocol/messages.js';
import type { RegistrationResult } from '../scaler/manager.js';
import type { Store } from '../store/index.js';
import { monoNow, type Clock } from '../util/clock.js';
import { errorMessage } from '../util/errors.js';
import type { Logger } from '../util/logger.js';
import { swallow } from '../util/swallowed-errors.js';
import { onClaim, type ClaimHost } from './agent-claim.js';
import { agentMessageSchema, describeIssues } from './agent-messages.js';
import { onRegister, type RegistrationHost } from './agent-registration.js';
import { agentGone, routeMessage } from './agent-routing.js';
import { HeldBookkeeping, RELEASING_FRAMES } from './held-bookkeeping.js';
import type { ClaimStore } from './claim-store.js';
import type { SessionPort } from './session-port.js';
import {
  announcesRefusal,
  nextState,
  REFUSAL_CODES,
  type RefusalKind,
  type SessionEvent,
  type SessionState,
} from './session-table.js';

export type { SessionPort };

export interface AgentSessionDeps {
  store: Store;
  dispatcher: Dispatcher;
  clock: Clock;
  logger: Logger;
  heartbeatIntervalMs: number;
  isStopping: () => boolean;
  /** How long a scaler agent told to leave after its job may take before it is cut off. */
  leaveGraceMs?: number | undefined;
  /** Told once the agent is registered: the limits on unregistered connections no longer apply. */
  onRegistered?: (agentId: string) => void;
  /** Redeems claim codes; without one a `claim` is refused with 4401. */
  claimStore?: ClaimStore | undefined;
}

/** Why a connection was refused: the kind, the close code it got and the reason it was given. */
export type Refusal = Readonly<{ kind: RefusalKind; code: number; reason: string }>;

/** Marks a frame that is not a JSON text frame (binary, or text that does not parse). */
export const NOT_JSON = Symbol('not-json');

/**
 * One agent connection, from its first frame to its close: hello → (claim) → register → registered
 * ⇄ busy → leaving → closed (see session-table.ts). Frames are handled strictly in arrival order.
 */
export class AgentSession {
  #state: SessionState = 'hello';
  #agent: ConnectedAgent | undefined;
  #refusal: Refusal | undefined;
  #registration: RegistrationResult | null = null;
  private chain: Promise<void> = Promise.resolve();
  private readonly registerTimer: NodeJS.Timeout;
  private readonly log: Logger;
  /** The claim's and the registration's narrow view of this session: what they read, and intents. */
  private readonly host: ClaimHost & RegistrationHost;
  /** Bookkeeping writes, held while a job sent to the agent has not started (held-bookkeeping.ts). */
  private readonly bookkeeping = new HeldBookkeeping();

  /** The transport, closed through here so that a close the server starts releases held writes. */
  private readonly port: SessionPort;

  constructor(
    private readonly deps: AgentSessionDeps,
    transport: SessionPort,
    remote: string,
  ) {
    // A close the server starts (a refusal, a replacement, its own shutdown) issues the held
    // bookkeeping at once, not when the transport's close event comes: at shutdown the store
    // closes before those events, and a single-use agent's job count must reach it.
    this.port = {
      send: (msg) => transport.send(msg),
      isOpen: () => transport.isOpen(),
      close: (code, reason, refused) => {
        this.bookkeeping.release();
        transport.close(code, reason, refused);
      },
    };
    const port = this.port;
    this.log = deps.logger.child({ component: 'agent-socket', remote });
    this.registerTimer = setTimeout(
      () => this.refuse('register-timeout', `no register message within ${LIMITS.registerTimeoutMs / 1000}s`),
      LIMITS.registerTimeoutMs,
    );
    this.registerTimer.unref();
    this.host = {
      deps,
      log: this.log,
      port,
      refuse: (kind: RefusalKind, reason: string, fields?: Record<string, unknown>) =>
        this.refuse(kind, reason, fields),
      send: (msg) => this.send(msg),
      claiming: () => {
        this.move('claim');
      },
      claimed: () => {
        this.move('claim.ok');
      },
      registering: () => {
        clearTimeout(this.registerTimer);
        this.move('register');
      },
      registered: (agent, scaled) => {
        this.#agent = agent;
        this.#registration = scaled;
        this.move('register.ok');
      },
      resumed: () => {
        this.move('job.assigned');
      },
      bookkeep: (issue) => this.bookkeeping.write(issue),
    };
  }

  /** Where the connection is in its life (session-table.ts). */
  get state(): SessionState {
    return this.#state;
  }

  /** The registered agent, once registration went through. */
  get agent(): ConnectedAgent | undefined {
    return this.#agent;
  }

  /** Why the connection was refused, when it was. */
  get refusal(): Refusal | undefined {
    return this.#refusal;
  }

  /** The scaler's answer for a scaler agent; null for a static one. */
  get registration(): RegistrationResult | null {
    return this.#registration;
  }

  /**
   * A parsed frame (or NOT_JSON); queued behind the frames before it. Its arrival already shows the
   * registered agent is alive: liveness must not wait until the frames ahead of it are handled (a
   * slow store write would otherwise make a healthy agent look silent).
   */
  receive(raw: unknown): Promise<void> {
    if (this.agent && this.state !== 'closed') this.agent.heard(monoNow(this.deps.clock));
    this.chain = this.chain.then(() => this.handle(raw));
    return this.chain;
  }

  /** Resolves once every frame received so far has been handled. */
  idle(): Promise<void> {
    return this.chain;
  }

  /** The transport closed. */
  closed(): Promise<void> {
    clearTimeout(this.registerTimer);
    // Frames that arrived before the close are still handled first (a register among them is undone).
    this.chain = this.chain
      .then(() => {
        this.move('close');
        return this.agent ? agentGone(this.deps, this.agent, this.log) : undefined;
      })
      // After the agent is gone: its row is then not recorded as connected (agent-registration.ts).
      .finally(() => this.bookkeeping.release())
      .catch((err: unknown) =>
        this.log.error({ err: errorMessage(err), agentId: this.agent?.id }, 'agent cleanup failed'),
      );
    return this.chain;
  }

  /** ws already closed the connection for a protocol violation; logged here with the agent's id. */
  protocolError(err: Error & { code?: string }): void {
    this.log.info(
      { agentId: this.agent?.id, code: err.code, err: err.message },
      'agent connection broke the protocol',
    );
  }

  private move(event: SessionEvent): boolean {
    const next = nextState(this.state, event);
    if (!next) return false;
    this.#state = next;
    return true;
  }

  private refuse(kind: RefusalKind, reason: string, fields: Record<string, unknown> = {}): void {
    const code = REFUSAL_CODES[kind];
    this.#refusal = { kind, code, reason };
    clearTimeout(this.registerTimer);
    this.log.warn({ ...fields, code, reason }, 'agent refused');
    if (announcesRefusal(kind)) this.port.send({ type: 'register.rejected', code, reason });
    this.move('refuse');
    this.port.close(code, reason, true);
  }

  private async handle(raw: unknown): Promise<void> {
    if (this.state === 'closed' && this.refusal) return; // refused: nothing more is read
    if (raw === NOT_JSON) return this.refuse('malformed', 'message is not a JSON text frame');
    try {
      if (this.agent) return await this.onMessage(this.agent, raw);
      const type = (raw as { type?: unknown } | null)?.type;
      if (type === 'claim' && this.state === 'hello') return await onClaim(this.host, raw);
      if (type === 'claim') return this.refuse('unexpected-message', 'claim: only one claim per connection');
      await onRegister(this.host, raw);
    } catch (err) {
      this.log.error({ err: errorMessage(err), agentId: this.agent?.id }, 'agent message handling failed');
      // A registration that failed half-way (the store, say) must not leave an open, unregistered socket.
      if (!this.agent) {
        this.#refusal = {
          kind: 'store-unavailable',
          code: CloseCodes.internal,
          reason: 'registration failed',
        };
        this.move('refuse');
        this.port.close(CloseCodes.internal, 'registration failed; retry', true);
      }
    }
  }

  /** Everything the orchestrator sends goes through here, so a job.assign moves the state. */
  private send(msg: OrchestratorMessage): void {
    if (msg.type === 'job.assign') {
      this.move('job.assigned');
      // Only a single-use agent's count decides anything (one that took a job takes no other, even
      // after a restart). A long-lived agent's is never read, and counting it cost a commit per job.
      const a = this.agent;
      this.bookkeeping.hold();
      if (a?.ephemeral)
        this.bookkeeping.write(
          () =>
            void this.deps.store.sessions
              .tookJob(a.id)
              .catch(swallow(this.log, 'session.job-count', { agentId: a.id })),
        );
    }
    if (this.port.isOpen()) this.port.send(msg);
  }

  private async onMessage(a: ConnectedAgent, raw: unknown): Promise<void> {
    const parsed = agentMessageSchema.safeParse(raw);
    if (!parsed.success) {
      const type = (raw as { type?: unknown } | null)?.type;
      this.log.warn(
        {
          agentId: a.id,
          type: typeof type === 'string' ? type.slice(0, 40) : undefined,
          problem: describeIssues(parsed.error),
        },
        'ignored an invalid agent message',
      );
      return;
    }
    a.heard(monoNow(this.deps.clock), this.deps.clock.now());
    const msg = parsed.data;
    if (msg.type === 'agent.draining') this.move('draining');
    await routeMessage(this.deps, a, msg, (m) => this.send(m));
    // The step's start was stamped as its frame was routed: the held writes no longer delay it.
    if (RELEASING_FRAMES.has(msg.type)) this.bookkeeping.release();
    if (msg.type === 'job.finished') this.move(a.ephemeral ? 'draining' : 'job.finished');
  }
}
