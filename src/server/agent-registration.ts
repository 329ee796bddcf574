import { canonicalizeLabels } from '../config/index.js';
import { newConnectedAgent, type ConnectedAgent } from '../dispatch/agent-registry.js';
import type { ActiveJob, Dispatcher } from '../dispatch/dispatcher.js';
import { CloseCodes, SELF_REPORTED_PREFIXES, type OrchestratorMessage } from '../protocol/messages.js';
import { RegistrationRefused, type RegistrationResult } from '../scaler/manager.js';
import type { Store } from '../store/index.js';
import type { SessionRecord } from '../store/sessions-repo.js';
import { hashSecret } from '../store/tokens-repo.js';
import { monoNow, type Clock } from '../util/clock.js';
import { errorMessage } from '../util/errors.js';
import type { Logger } from '../util/logger.js';
import { swallow } from '../util/swallowed-errors.js';
import { describeIssues, registerSchema } from './agent-messages.js';
import { adoptMovedJob, reattach } from './agent-routing.js';
import { reapRefusedAgent } from './reap-refused.js';
import type { SessionPort } from './session-port.js';
import { decideSession, newSessionSecret, type SessionDecision } from './session-proof.js';
import type { RefusalKind } from './session-table.js';

/** What a registration reads of the session's dependencies. */
export interface RegistrationDeps {
  store: Store;
  dispatcher: Dispatcher;
  clock: Clock;
  heartbeatIntervalMs: number;
  isStopping: () => boolean;
  /** Told once the agent is registered: the limits on unregistered connections no longer apply. */
  onRegistered?: (agentId: string) => void;
}

/**
 * What a registration may touch of its session: it reads, refuses and sends; the session's state,
 * its agent and its register timer change only through the intents below.
 */
export interface RegistrationHost {
  readonly deps: RegistrationDeps;
  readonly log: Logger;
  readonly port: SessionPort;
  refuse(kind: RefusalKind, reason: string, fields?: Record<string, unknown>): void;
  /** The session's own send, which every message to a registered agent goes through. */
  send(msg: OrchestratorMessage): void;
  /** A well-formed register arrived: the register timer stops and the session is `registering`. */
  registering(): void;
  /** The agent is registered: from now on the session holds it and the scaler's answer for it. */
  registered(agent: ConnectedAgent, scaled: RegistrationResult | null): void;
  /** The agent came back still running its job: the session is `busy`. */
  resumed(): void;
  /** Issues a bookkeeping write now, or once a job sent to the agent has started (held-bookkeeping.ts). */
  bookkeep(issue: () => void): void;
}

/**
 * A register frame: the token, the labels, the session proof and (for a scaler agent) the scaler's
 * record decide whether the agent may join; then it is added, acked and offered its job.
 */
export async function onRegister(host: RegistrationHost, raw: unknown): Promise<void> {
  const parsed = registerSchema.safeParse(raw);
  if (!parsed.success)
    return host.refuse('malformed', `invalid register message: ${describeIssues(parsed.error)}`);
  const msg = parsed.data;
  host.registering();
  const deps = host.deps;
  const agentId = msg.agentId;
  if (deps.isStopping()) return host.refuse('shutting-down', 'orchestrator is shutting down');
  const now = new Date(deps.clock.now());
  const { check, session: stored } = await deps.store.tokens.checkWithSession(msg.token, now);
  if (!check.ok) return host.refuse('bad-token', check.reason, { agentId });
  if (check.agentId !== agentId)
    return host.refuse('bad-token', `token is not valid for agent id "${agentId}"`, { agentId });
  const labels = canonicalizeLabels(msg.labels);
  const scope = new Set(check.labels);
  const outside = labels.filter((l) => !scope.has(l) && !SELF_REPORTED_PREFIXES.some((p) => l.startsWith(p)));
  if (outside.length)
    return host.refuse('labels-out-of-scope', `labels outside the token's scope: ${outside.join(', ')}`, {
      agentId,
    });
  const singleUse = check.kind === 'ephemeral' || agentId.startsWith('scaler-');
  const session = await proveSession(host, agentId, stored, msg.session, singleUse);
  if (!session.ok) return;
  let scaled: RegistrationResult | null = null;
  const scaler = deps.dispatcher.scaler;
  // The scaler's registered stamp: issued with the session's own bookkeeping, after the job's claim.
  const stamps: (() => void)[] = [];
  const issueStamps = () => stamps.splice(0).forEach((issue) => issue());
  if (singleUse) {
    if (!scaler) return host.refuse('no-scaler', 'no scaler is configured here', { agentId });
    try {
      scaled = await scaler.registerAgent(agentId, (issue) => stamps.push(issue));
    } catch (err) {
      if (!(err instanceof RegistrationRefused)) {
        host.log.error({ err: errorMessage(err), agentId }, 'scaler lookup failed');
        return host.refuse('store-unavailable', 'Scaler state unavailable', { agentId });
      }
      host.refuse('unknown-scaler-id', err.message, { agentId });
      // Compute that presents an id we never spawned (or forgot) is reclaimed, not left running.
      await reapRefusedAgent(scaler, agentId, labels, host.log);
      return;
    }
  }
  // The scaler has counted the agent as registered: if a read or write below throws (the session's
  // caller closes the connection and the agent retries), the stamp still goes, so a restart sees
  // what the scaler saw.
  const stamping = <T>(p: Promise<T>, alsoOnThrow?: () => void) =>
    p.catch((err: unknown) => {
      issueStamps();
      alsoOnThrow?.();
      throw err;
    });
  // A read or write below threw (the moved job's takeover, the session write): the connection is
  // closed with a request to dial again. A plain close ends the scaler's entry at once (undo); here
  // the agent was asked back, so its entry and its moved job, if taken over, wait for it through the
  // reconnect grace, and end as that close would if it is not back.
  const askedBack = (moved: ActiveJob | undefined) => {
    const grace = deps.dispatcher.reconnectGraceMs;
    if (scaled) scaler?.onRegistrationFailed(agentId, scaled.boundJobId, grace);
    if (moved) deps.dispatcher.active.orphan(moved, 'agent disconnected', grace);
  };
  // A takeover that threw took nothing over: only the scaler's entry waits.
  const adopted = await stamping(adoptMovedJob(deps.dispatcher, agentId, msg.activeJobId), () =>
    askedBack(undefined),
  );
  const undo = async () => {
    issueStamps();
    if (scaled) await scaler?.onAgentDisconnected(agentId);
    if (adopted) deps.dispatcher.active.orphan(adopted, 'agent disconnected');
  };
  if (!host.port.isOpen()) return undo();
  let secret: string | undefined;
  if (!session.decision.resume) {
    secret = newSessionSecret();
    // A bound agent's claim follows at once, and its synced commit carries the session's too.
    const opened = await stamping(
      deps.store.sessions.open(agentId, hashSecret(secret), session.decision.replacing, {
        syncedByNext: scaled?.boundJobId !== undefined,
      }),
      () => askedBack(adopted),
    );
    if (!opened || !host.port.isOpen()) {
      // The agent never learns this secret: it must be able to open a session again.
      if (opened) await deps.store.sessions.forget(agentId, hashSecret(secret));
      await undo();
      if (!opened)
        refuseUnproven(host, agentId, 'another registration of this agent opened its session first');
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
    // whatever the registration says. The stored count may still be held (held-bookkeeping.ts) while
    // the connection it replaces is in memory with its own.
    jobsDone: session.decision.resume ? Math.max(session.decision.jobsTaken, previous?.jobsTaken ?? 0) : 0,
    version: msg.version,
    hostname: msg.hostname,
    tokenId: check.tokenId,
    nowMs: deps.clock.now(),
    monoMs: monoNow(deps.clock),
    mono: () => monoNow(deps.clock),
    send: (m) => host.send(m),
    close: (code, reason) => host.port.close(code, reason, false),
  });
  host.registered(agent, scaled);
  deps.dispatcher.registry.add(agent);
  deps.onRegistered?.(agent.id);
  const resume = reattach(deps.dispatcher, agent, msg.activeJobId, (m) => host.send(m));
  if (resume) host.resumed();
  host.send({
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
  host.log.info({ agentId: agent.id, kind: agent.kind, labels: labels.length }, 'agent registered');
  const record = () =>
    host.bookkeep(() => {
      issueStamps();
      recordRegistered(host, agent, check.tokenId, {
        scalerName: scaled?.scalerName ?? null,
        hostname: msg.hostname ?? null,
        version: msg.version ?? null,
        now,
      });
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
 * claim they put two syncs between an agent's hello and its job. So they go after it, and after
 * the job's start (held-bookkeeping.ts). An agent whose connection closed meanwhile has had its row
 * marked gone already: it is not recorded as connected after that.
 */
function recordRegistered(
  host: RegistrationHost,
  agent: ConnectedAgent,
  tokenId: string,
  r: { scalerName: string | null; hostname: string | null; version: string | null; now: Date },
): void {
  const deps = host.deps;
  const agentId = agent.id;
  if (deps.dispatcher.registry.get(agentId) === agent)
    deps.store.agents
      .connected({ id: agentId, kind: agent.kind, labels: agent.labelList, ...r })
      .catch(swallow(host.log, 'agent.record-connected', { agentId }));
  // A failed stamp is logged and counted, and never refuses a good token.
  void deps.store.tokens
    .stampUsed(tokenId, r.now)
    .catch(swallow(host.log, 'session.token-last-used', { agentId }));
}

/**
 * Whether this registration may take the agent id's session (see session-proof.ts). A refusal
 * is a security event: a valid token in the hands of something that is not the agent.
 */
async function proveSession(
  host: RegistrationHost,
  agentId: string,
  record: SessionRecord | undefined,
  proof: string | undefined,
  singleUse: boolean,
): Promise<{ ok: true; decision: Extract<SessionDecision, { ok: true }> } | { ok: false }> {
  const sessions = host.deps.store.sessions;
  const d = host.deps.dispatcher;
  const inUse =
    record !== undefined &&
    !singleUse &&
    (d.registry.get(agentId) !== undefined ||
      [...d.active.values()].some((a) => a.agentId === agentId) ||
      (await sessions.inUse(agentId)));
  const decision = decideSession({ record, proof, singleUse, inUse });
  if (decision.ok) return { ok: true, decision };
  refuseUnproven(host, agentId, decision.reason);
  return { ok: false };
}

function refuseUnproven(host: RegistrationHost, agentId: string, reason: string): void {
  host.log.warn(
    { agentId, securityEvent: 'agent-session-unproven' },
    'security: refused a registration with a valid token that could not prove the agent session',
  );
  host.refuse('session-unproven', `session refused: ${reason}`, { agentId });
}
