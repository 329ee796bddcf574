/**
 * The manager harness's fake agents: each registers through the same AgentSession the WebSocket
 * handler uses (or, in a manager-only harness, straight with the scaler), records the messages it
 * is sent, and ends its session when its socket closes.
 */
import { canonicalizeLabels } from '../../src/config/index.js';
import { newConnectedAgent, type ConnectedAgent } from '../../src/dispatch/agent-registry.js';
import type { Dispatcher } from '../../src/dispatch/dispatcher.js';
import { SELF_REPORTED_PREFIXES, type OrchestratorMessage } from '../../src/protocol/messages.js';
import {
  RegistrationRefused,
  type RegistrationResult,
  type ScalerManager,
} from '../../src/scaler/manager.js';
import type { SpawnContext as SpawnRequest } from '../../src/scaler/types.js';
import { AgentSession, type AgentSessionDeps } from '../../src/server/agent-session.js';
import type { Store } from '../../src/store/index.js';
import type { ManualClock } from '../../src/util/clock.js';
import type { RecordingBackend } from './recording-backend.js';

export interface FakeAgent {
  id: string;
  messages: OrchestratorMessage[];
  connected: boolean;
  conn: ConnectedAgent;
  registration: RegistrationResult | null;
  /** The shared agent session (absent in manager-only harnesses). */
  session?: AgentSession;
}

export type RegisterOutcome =
  { ok: true; result: RegistrationResult | null; agent: FakeAgent } | { ok: false; reason: string };

/** What registering and disconnecting fake agents uses of the harness. */
export interface AgentHarness {
  readonly store: Store;
  readonly clock: ManualClock;
  readonly manager: ScalerManager;
  readonly dispatcher: Dispatcher | undefined;
  readonly agents: Map<string, FakeAgent>;
  /** The session secret each agent id was given, presented again by its re-registrations. */
  readonly sessionSecrets: Map<string, string>;
  sessionDeps(): AgentSessionDeps;
  backendOf(agentId: string): RecordingBackend | undefined;
  settle(): Promise<void>;
}

/** The token a spawn request carries (the manager always spawns with a token). */
export function spawnToken(req: SpawnRequest): string {
  if (req.auth.kind !== 'token') throw new Error(`spawn of ${req.agentId} carries a claim code, not a token`);
  return req.auth.token;
}

/**
 * A `register` message through the same AgentSession the WebSocket handler uses (token check and
 * scope, scaler.onAgentRegistered, registry.add, dispatchBound / requestPump). Without an explicit
 * token, a scaler agent uses the one its spawn got and any other agent gets a freshly minted one.
 */
export async function registerFakeAgent(
  h: AgentHarness,
  agentId: string,
  opts: { labels?: string[]; token?: string } = {},
): Promise<RegisterOutcome> {
  const req = h.backendOf(agentId)?.requestFor(agentId);
  const labels = canonicalizeLabels(opts.labels ?? req?.fullLabels ?? []);
  if (!h.dispatcher)
    return registerWithoutDispatcher(h, agentId, labels, opts.token ?? (req ? spawnToken(req) : undefined));
  const token =
    opts.token ??
    (req ? spawnToken(req) : undefined) ??
    (
      await h.store.tokens.mint({
        agentId,
        labels,
        kind: agentId.startsWith('scaler-') ? 'ephemeral' : 'static',
        now: new Date(h.clock.now()),
      })
    ).token;
  const fake = { id: agentId, messages: [], connected: true, registration: null } as unknown as FakeAgent;
  fake.session = new AgentSession(
    h.sessionDeps(),
    {
      send: (msg) => void fake.messages.push(msg),
      // A closed fake socket ends its session the way a real close event does.
      close: () => queueMicrotask(() => void disconnectFake(h, fake)),
      isOpen: () => fake.connected,
    },
    'harness',
  );
  // Each harness agent is one process: its reconnects prove the session its first registration got.
  const session = h.sessionSecrets.get(agentId);
  await fake.session.receive({
    type: 'register',
    protocol: 1,
    agentId,
    token,
    labels,
    ...(session ? { session } : {}),
  });
  const ack = fake.messages.find((m) => m.type === 'register.ack');
  if (ack?.type === 'register.ack' && ack.session) h.sessionSecrets.set(agentId, ack.session);
  if (!fake.session.agent) {
    fake.connected = false;
    await fake.session.closed();
    return { ok: false, reason: fake.session.refusal?.reason ?? 'registration failed' };
  }
  fake.conn = fake.session.agent;
  fake.registration = fake.session.registration;
  h.agents.set(agentId, fake);
  await h.settle();
  return { ok: true, result: fake.registration, agent: fake };
}

/** Manager-only harnesses (no dispatcher) check the token and call the scaler directly. */
async function registerWithoutDispatcher(
  h: AgentHarness,
  agentId: string,
  labels: string[],
  token: string | undefined,
): Promise<RegisterOutcome> {
  if (token !== undefined) {
    const check = await h.store.tokens.check(token, new Date(h.clock.now()));
    if (!check.ok) return { ok: false, reason: check.reason };
    if (check.agentId !== agentId)
      return { ok: false, reason: `token is not valid for agent id "${agentId}"` };
    const scope = new Set(check.labels);
    const outside = labels.filter(
      (l) => !scope.has(l) && !SELF_REPORTED_PREFIXES.some((p) => l.startsWith(p)),
    );
    if (outside.length)
      return { ok: false, reason: `labels outside the token's scope: ${outside.join(', ')}` };
  }
  let scaled: RegistrationResult | null;
  try {
    scaled = h.manager.onAgentRegistered(agentId);
  } catch (err) {
    if (err instanceof RegistrationRefused) return { ok: false, reason: err.message };
    throw err;
  }
  const fake: FakeAgent = {
    id: agentId,
    messages: [],
    connected: true,
    registration: scaled,
    conn: newConnectedAgent({
      id: agentId,
      labels,
      scaled,
      nowMs: h.clock.now(),
      send: (msg) => {
        if (fake.connected) fake.messages.push(msg);
      },
      close: () => queueMicrotask(() => void disconnectFake(h, fake)),
    }),
  };
  h.agents.set(agentId, fake);
  await h.settle();
  return { ok: true, result: scaled, agent: fake };
}

/** The agent's socket closed: its session ends (or, without one, the scaler is told). */
export async function disconnectFake(h: AgentHarness, fake: FakeAgent): Promise<void> {
  if (!fake.connected) return;
  fake.connected = false;
  if (fake.session) await fake.session.closed();
  else await h.manager.onAgentDisconnected(fake.id);
  await h.settle();
}
