import { canonicalizeLabels } from '../config/index.js';
import { newConnectedAgent, type ConnectedAgent } from '../dispatch/agent-registry.js';
import type { Dispatcher } from '../dispatch/dispatcher.js';
import { LIMITS } from '../protocol/limits.js';
import { CloseCodes, SELF_REPORTED_PREFIXES, type OrchestratorMessage } from '../protocol/messages.js';
import { RegistrationRefused, type RegistrationResult } from '../scaler/manager.js';
import type { Store } from '../store/index.js';
import { monoNow, type Clock } from '../util/clock.js';
import { errorMessage } from '../util/errors.js';
import type { Logger } from '../util/logger.js';
import { swallow } from '../util/swallowed-errors.js';
import { agentMessageSchema, claimSchema, describeIssues, registerSchema } from './agent-messages.js';
import { adoptMovedJob, agentGone, reattach, routeMessage } from './agent-routing.js';
import type { ClaimStore } from './claim-store.js';
import { reapRefusedAgent } from './reap-refused.js';
import { hashSecret } from '../store/tokens-repo.js';
import { decideSession, newSessionSecret, type SessionDecision } from './session-proof.js';
import {
  announcesRefusal,
  nextState,
  REFUSAL_CODES,
  type RefusalKind,
  type SessionEvent,
  type SessionState,
} from './session-table.js';

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

/** The session's view of its transport: a WebSocket in production, an in-memory fake in tests. */
export interface SessionPort {
  send(msg: OrchestratorMessage): void;
  /** Close the connection; a `refused` peer is not waited on for long. */
  close(code: number, reason: string, refused: boolean): void;
  isOpen(): boolean;
}

/** Marks a frame that is not a JSON text frame (binary, or text that does not parse). */
export const NOT_JSON = Symbol('not-json');

/**
 * One agent connection, from its first frame to its close: hello → (claim) → register → registered
 * ⇄ busy → leaving → closed (see session-table.ts). Frames are handled strictly in arrival order.
 */
export class AgentSession {
  state: SessionState = 'hello';
  agent: ConnectedAgent | undefined;
  refusal: { kind: RefusalKind; code: number; reason: string } | undefined;
  /** The scaler's answer for a scaler agent; null for a static one. */
  registration: RegistrationResult | null = null;
  private chain: Promise<void> = Promise.resolve();
  private readonly registerTimer: NodeJS.Timeout;
  private readonly log: Logger;

  constructor(
    private readonly deps: AgentSessionDeps,
    private readonly port: SessionPort,
    remote: string,
  ) {
    this.log = deps.logger.child({ component: 'agent-socket', remote });
    this.registerTimer = setTimeout(
      () => this.refuse('register-timeout', `no register message within ${LIMITS.registerTimeoutMs / 1000}s`),
      LIMITS.registerTimeoutMs,
    );
    this.registerTimer.unref();
  }

  /**
   * A parsed frame (or NOT_JSON); queued behind the frames before it. Its arrival already shows the
   * registered agent is alive: liveness must not wait until the frames ahead of it are handled (a
   * slow store write would otherwise make a healthy agent look silent).
   */
  receive(raw: unknown): Promise<void> {
    if (this.agent && this.state !== 'closed') this.agent.lastSeenMono = monoNow(this.deps.clock);
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
    this.state = next;
    return true;
  }

  private refuse(kind: RefusalKind, reason: string, fields: Record<string, unknown> = {}): void {
    const code = REFUSAL_CODES[kind];
    this.refusal = { kind, code, reason };
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
      if (type === 'claim' && this.state === 'hello') return await this.onClaim(raw);
      if (type === 'claim') return this.refuse('unexpected-message', 'claim: only one claim per connection');
      await this.onRegister(raw);
    } catch (err) {
      this.log.error({ err: errorMessage(err), agentId: this.agent?.id }, 'agent message handling failed');
      // A registration that failed half-way (the store, say) must not leave an open, unregistered socket.
      if (!this.agent) {
        this.refusal = {
          kind: 'store-unavailable',
          code: CloseCodes.internal,
          reason: 'registration failed',
        };
        this.move('refuse');
        this.port.close(CloseCodes.internal, 'registration failed; retry', true);
      }
    }
  }

  private async onClaim(raw: unknown): Promise<void> {
    const parsed = claimSchema.safeParse(raw);
    if (!parsed.success)
      return this.refuse('malformed', `invalid claim message: ${describeIssues(parsed.error)}`);
    if (this.deps.isStopping()) return this.refuse('shutting-down', 'orchestrator is shutting down');
    const claims = this.deps.claimStore;
    if (!claims)
      return this.refuse(
        'no-claim-store',
        'claim codes are not accepted: this orchestrator has no claim store',
      );
    this.move('claim');
    let res;
    try {
      res = await claims.redeem(parsed.data.code, this.deps.clock.now());
    } catch (err) {
      this.log.error({ err: errorMessage(err) }, 'claim store failed');
      return this.refuse('store-unavailable', 'Claim store unavailable');
    }
    if (!res.ok) return this.refuse('claim-refused', `claim refused: ${res.reason}`);
    this.move('claim.ok');
    this.log.info({ agentId: res.agentId }, 'claim code redeemed');
    this.port.send({ type: 'claim.ack', agentId: res.agentId, token: res.token, labels: res.labels });
  }

  private async onRegister(raw: unknown): Promise<void> {
    const parsed = registerSchema.safeParse(raw);
    if (!parsed.success)
      return this.refuse('malformed', `invalid register message: ${describeIssues(parsed.error)}`);
    const msg = parsed.data;
    clearTimeout(this.registerTimer);
    this.move('register');
    const deps = this.deps;
    const agentId = msg.agentId;
    if (deps.isStopping()) return this.refuse('shutting-down', 'orchestrator is shutting down');
    const now = new Date(deps.clock.now());
    const check = await deps.store.tokens.check(msg.token, now);
    if (!check.ok) return this.refuse('bad-token', check.reason, { agentId });
    if (check.agentId !== agentId)
      return this.refuse('bad-token', `token is not valid for agent id "${agentId}"`, { agentId });
    const labels = canonicalizeLabels(msg.labels);
    const scope = new Set(check.labels);
    const outside = labels.filter(
      (l) => !scope.has(l) && !SELF_REPORTED_PREFIXES.some((p) => l.startsWith(p)),
    );
    if (outside.length)
      return this.refuse('labels-out-of-scope', `labels outside the token's scope: ${outside.join(', ')}`, {
        agentId,
      });
    const singleUse = check.kind === 'ephemeral' || agentId.startsWith('scaler-');
    const session = await this.proveSession(agentId, msg.session, singleUse);
    if (!session.ok) return;
    let scaled: RegistrationResult | null = null;
    const scaler = deps.dispatcher.scaler;
    if (singleUse) {
      if (!scaler) return this.refuse('no-scaler', 'no scaler is configured here', { agentId });
      try {
        scaled = await scaler.registerAgent(agentId);
      } catch (err) {
        if (!(err instanceof RegistrationRefused)) {
          this.log.error({ err: errorMessage(err), agentId }, 'scaler lookup failed');
          return this.refuse('store-unavailable', 'Scaler state unavailable', { agentId });
        }
        this.refuse('unknown-scaler-id', err.message, { agentId });
        // Compute that presents an id we never spawned (or forgot) is reclaimed, not left running.
        await reapRefusedAgent(scaler, agentId, labels, this.log);
        return;
      }
    }
    const adopted = await adoptMovedJob(deps.dispatcher, agentId, msg.activeJobId, scaled !== null);
    const undo = async () => {
      if (scaled) await scaler?.onAgentDisconnected(agentId);
      if (adopted) deps.dispatcher.active.orphan(adopted, 'agent disconnected');
    };
    if (!this.port.isOpen()) return undo();
    let secret: string | undefined;
    if (!session.decision.resume) {
      secret = newSessionSecret();
      const opened = await deps.store.sessions.open(agentId, hashSecret(secret), session.decision.replacing);
      if (!opened || !this.port.isOpen()) {
        // The agent never learns this secret: it must be able to open a session again.
        if (opened) await deps.store.sessions.forget(agentId, hashSecret(secret));
        await undo();
        if (!opened)
          this.refuseUnproven(agentId, 'another registration of this agent opened its session first');
        return;
      }
    }
    const previous = deps.dispatcher.registry.get(agentId);
    if (previous) previous.close(CloseCodes.duplicate, 'replaced by a newer connection of the same agent');
    const agent = newConnectedAgent({
      id: agentId,
      labels,
      scaled,
      // The server's own count: a single-use agent that was handed a job is offered no other,
      // whatever the registration says.
      jobsDone: session.decision.resume ? session.decision.jobsTaken : 0,
      version: msg.version,
      hostname: msg.hostname,
      nowMs: deps.clock.now(),
      monoMs: monoNow(deps.clock),
      mono: () => monoNow(deps.clock),
      send: (m) => this.send(m),
      close: (code, reason) => this.port.close(code, reason, false),
    });
    agent.tokenId = check.tokenId;
    this.agent = agent;
    this.registration = scaled;
    this.move('register.ok');
    deps.dispatcher.registry.add(agent);
    deps.onRegistered?.(agent.id);
    const resume = reattach(deps.dispatcher, agent, msg.activeJobId, (m) => this.send(m));
    if (resume) this.move('job.assigned');
    this.send({
      type: 'register.ack',
      agentId: agent.id,
      labels,
      scalerManaged: scaled !== null,
      pendingDispatch: scaled?.boundJobId !== undefined,
      warmPool: scaled?.warm ?? false,
      heartbeatIntervalMs: deps.heartbeatIntervalMs,
      acksResults: true,
      ...(resume ? { resumeJobId: resume } : {}),
      ...(secret ? { session: secret } : {}),
    });
    this.log.info({ agentId: agent.id, kind: agent.kind, labels: labels.length }, 'agent registered');
    const record = () =>
      this.recordRegistered(agent, check.tokenId, {
        scalerName: scaled?.scalerName ?? null,
        hostname: msg.hostname ?? null,
        version: msg.version ?? null,
        now,
      });
    if (resume) return record();
    try {
      if (scaled?.boundJobId) await deps.dispatcher.dispatchBound(agent.id, scaled.boundJobId);
      else void deps.dispatcher.requestPump();
    } finally {
      record();
    }
  }

  /**
   * The registration's bookkeeping: the agents row (the API's and the peers' view) and the token's
   * last use. Neither decides anything on the way to the first job, and on the embedded database
   * every write waits for the one before it, each with its own sync: written before the bound job's
   * claim they put two syncs between an agent's hello and its job. So they go after it. An agent
   * whose connection closed meanwhile has had its row marked gone already: it is not recorded as
   * connected after that.
   */
  private recordRegistered(
    agent: ConnectedAgent,
    tokenId: string,
    r: { scalerName: string | null; hostname: string | null; version: string | null; now: Date },
  ): void {
    const deps = this.deps;
    const agentId = agent.id;
    if (deps.dispatcher.registry.get(agentId) === agent)
      deps.store.agents
        .connected({ id: agentId, kind: agent.kind, labels: agent.labelList, ...r })
        .catch(swallow(this.log, 'agent.record-connected', { agentId }));
    // A failed stamp is logged and counted, and never refuses a good token.
    void deps.store.tokens
      .stampUsed(tokenId, r.now)
      .catch(swallow(this.log, 'session.token-last-used', { agentId }));
  }

  /**
   * Whether this registration may take the agent id's session (see session-proof.ts). A refusal
   * is a security event: a valid token in the hands of something that is not the agent.
   */
  private async proveSession(
    agentId: string,
    proof: string | undefined,
    singleUse: boolean,
  ): Promise<{ ok: true; decision: Extract<SessionDecision, { ok: true }> } | { ok: false }> {
    const sessions = this.deps.store.sessions;
    const record = await sessions.find(agentId);
    const d = this.deps.dispatcher;
    const inUse =
      record !== undefined &&
      !singleUse &&
      (d.registry.get(agentId) !== undefined ||
        [...d.active.values()].some((a) => a.agentId === agentId) ||
        (await sessions.inUse(agentId)));
    const decision = decideSession({ record, proof, singleUse, inUse });
    if (decision.ok) return { ok: true, decision };
    this.refuseUnproven(agentId, decision.reason);
    return { ok: false };
  }

  private refuseUnproven(agentId: string, reason: string): void {
    this.log.warn(
      { agentId, securityEvent: 'agent-session-unproven' },
      'security: refused a registration with a valid token that could not prove the agent session',
    );
    this.refuse('session-unproven', `session refused: ${reason}`, { agentId });
  }

  /** Everything the orchestrator sends goes through here, so a job.assign moves the state. */
  private send(msg: OrchestratorMessage): void {
    if (msg.type === 'job.assign') {
      this.move('job.assigned');
      // Only a single-use agent's count decides anything (one that took a job takes no other, even
      // after a restart). A long-lived agent's is never read, and counting it cost a commit per job.
      const a = this.agent;
      if (a?.ephemeral)
        this.deps.store.sessions
          .tookJob(a.id)
          .catch(swallow(this.log, 'session.job-count', { agentId: a.id }));
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
    a.lastSeenMs = this.deps.clock.now();
    a.lastSeenMono = monoNow(this.deps.clock);
    const msg = parsed.data;
    if (msg.type === 'agent.draining') this.move('draining');
    await routeMessage(this.deps, a, msg, (m) => this.send(m));
    if (msg.type === 'job.finished') this.move(a.ephemeral ? 'draining' : 'job.finished');
  }
}
