import type { Context, Hono } from 'hono';
import { canonicalizeLabels } from '../config/index.js';
import type { ConnectedAgent, DepartedAgent } from '../dispatch/agent-registry.js';
import type { Dispatcher } from '../dispatch/dispatcher.js';
import { newId } from '../dispatch/job-rows.js';
import { CloseCodes } from '../protocol/messages.js';
import type { Store } from '../store/index.js';
import { mergeAgents, type PeerPart } from '../cluster/cluster-view.js';
import { partial, readPeerParts } from '../cluster/peer-read.js';
import { monoNow, type Clock } from '../util/clock.js';
import { uptimeMs } from './heartbeat-check.js';
import {
  bad,
  DEFAULT_AGENT_TOKEN_TTL_SECONDS,
  describeIssues,
  idProblem,
  readJsonBody,
  tokenBodySchema,
} from './http-validation.js';
import { registerAgentTokenRotate } from './agent-token-rotate.js';
import { tokenView } from './token-view.js';

export { tokenView } from './token-view.js';

export interface AgentRoutesDeps {
  store: Store;
  dispatcher: Dispatcher;
  clock: Clock;
  /** This instance, named on its own rows of the merged list. */
  instanceId: string;
  /** The other instances' published parts (clustering); absent on one instance. */
  peerParts?: (() => Promise<PeerPart[]>) | undefined;
}

function notFound(c: Context, what: string, id: string) {
  return c.json({ error: 'not found', problems: [`${what} ${id} does not exist`] }, 404);
}

function agentView(d: Dispatcher, clock: Clock, a: ConnectedAgent, gone?: DepartedAgent) {
  // Stamps are placed back from now by elapsed (monotonic) time: after a wall-clock step they stay
  // in the past, so no client shows a negative uptime.
  const nowMs = clock.now();
  const mono = monoNow(clock);
  const up = uptimeMs(a, clock);
  // A departed agent's job is shown only while it still waits for the agent.
  const jobId = gone
    ? gone.jobId && d.active.get(gone.jobId)?.agentId === a.id
      ? gone.jobId
      : null
    : (a.busyJobId ?? null);
  return {
    id: a.id,
    kind: a.kind,
    scaler: a.scalerName ?? null,
    labels: a.labelList,
    state: gone ? 'disconnected' : d.registry.stateOf(a),
    jobId,
    busyJobId: gone ? null : (a.busyJobId ?? null),
    drainedByOperator: d.registry.isHeld(a.id),
    tokenId: a.tokenId ?? null,
    version: a.version ?? null,
    hostname: a.hostname ?? null,
    // Static agents run wherever they were started; scaled ones say which backend made them.
    backend: d.scaler?.state.agents.get(a.id)?.type ?? (a.kind === 'static' ? 'static' : null),
    idleMs: gone || a.busyJobId !== undefined ? null : Math.max(0, Math.round(mono - a.idleSinceMono)),
    connectedAt: new Date(nowMs - up),
    lastSeenAt: new Date(nowMs - Math.max(0, mono - a.lastSeenMono)),
    uptimeMs: gone ? null : Math.round(up),
    disconnectedAt: gone ? new Date(gone.goneAtMs) : null,
  };
}

/** This instance's agents: connected ones, and static ones within their reconnect grace. */
export function listAgents(d: Dispatcher, clock: Clock) {
  const agents = d.registry.list().map((a) => agentView(d, clock, a));
  for (const g of d.registry.departedWithin(clock.now(), d.reconnectGraceMs))
    agents.push(agentView(d, clock, g.agent, g));
  return agents;
}

/**
 * Agents and their tokens under /api/v1/agents: the list (with each agent's state), token minting,
 * listing and revocation, and an operator's drain and resume.
 */
export function registerAgentRoutes(app: Hono, deps: AgentRoutesDeps): void {
  const { store, dispatcher } = deps;
  const registry = dispatcher.registry;
  const departed = () => registry.departedWithin(deps.clock.now(), dispatcher.reconnectGraceMs);

  for (const pattern of ['/api/v1/agents/tokens/:id', '/api/v1/agents/:id/*'])
    app.use(pattern, async (c, next) => {
      const problem = idProblem('id', c.req.param('id') ?? '');
      if (problem) return bad(c, [problem]);
      await next();
    });

  app.get('/api/v1/agents', async (c) => {
    const own = listAgents(dispatcher, deps.clock);
    const peers = await readPeerParts(deps.peerParts);
    return c.json({
      self: deps.instanceId,
      agents: mergeAgents(deps.instanceId, own, peers.parts),
      ...partial(peers),
    });
  });

  app.post('/api/v1/agents/tokens', async (c) => {
    const body = await readJsonBody(c);
    if (!body.ok) return bad(c, body.problems);
    const parsed = tokenBodySchema.safeParse(body.value);
    if (!parsed.success) return bad(c, describeIssues(parsed.error));
    const labels = canonicalizeLabels(parsed.data.labels);
    const reserved = labels.filter((l) => l.startsWith('kici:'));
    if (reserved.length) return bad(c, [`labels: the kici: prefix is reserved (${reserved.join(', ')})`]);
    const agentId = parsed.data.agentId ?? newId('static');
    const minted = await store.tokens.mint({
      agentId,
      labels,
      kind: 'static',
      // Absent: the default lifetime; null: never expires, because the operator said so.
      ttlMs:
        parsed.data.ttlSeconds === null
          ? undefined
          : (parsed.data.ttlSeconds ?? DEFAULT_AGENT_TOKEN_TTL_SECONDS) * 1000,
      now: new Date(deps.clock.now()),
    });
    dispatcher.noteStaticToken(agentId, labels, minted.expiresAt);
    void dispatcher.requestPump();
    return c.json(
      { tokenId: minted.tokenId, agentId, labels, token: minted.token, expiresAt: minted.expiresAt },
      201,
    );
  });

  app.get('/api/v1/agents/tokens', async (c) => {
    const all = c.req.query('all');
    if (all !== undefined && all !== 'true' && all !== 'false') return bad(c, ['all: true or false']);
    const tokens = await store.tokens.list({ all: all === 'true' });
    const now = deps.clock.now();
    return c.json({ tokens: tokens.map((t) => tokenView(t, now)) });
  });

  app.delete('/api/v1/agents/tokens/:id', async (c) => {
    const id = c.req.param('id');
    const info = await store.tokens.revoke(id, new Date(deps.clock.now()));
    if (!info) return notFound(c, 'token', id);
    // Whoever holds the token goes now, and its job with it: it cannot come back to finish it.
    const holders = [
      ...registry.list().filter((a) => a.tokenId === id),
      ...departed()
        .filter((g) => g.agent.tokenId === id)
        .map((g) => g.agent),
    ];
    for (const a of holders) {
      a.revoke();
      registry.forgetDeparted(a.id);
      registry.release(a.id);
      for (const active of [...dispatcher.active.values()])
        if (active.agentId === a.id)
          await dispatcher.active.loseJob(active, `the token of agent ${a.id} was revoked`);
      if (registry.get(a.id) === a) a.close(CloseCodes.unauthorized, 'token revoked');
    }
    await dispatcher.refreshStaticScopes();
    void dispatcher.requestPump();
    return c.json({
      ...tokenView(info, deps.clock.now()),
      disconnected: holders.map((a) => a.id),
    });
  });

  registerAgentTokenRotate(app, deps);

  /** The agent, connected or within its reconnect grace, or undefined. */
  const find = (id: string) => {
    const a = registry.get(id);
    if (a) return { a, gone: undefined };
    const gone = departed().find((g) => g.agent.id === id);
    return gone && { a: gone.agent, gone };
  };

  // An agent held by another instance is acted on there: say which one instead of "does not exist".
  const elsewhere = async (c: Context, id: string) => {
    const holder = (await readPeerParts(deps.peerParts)).parts.find(
      (p) => p.state === 'alive' && p.part.agents.some((a) => a.id === id),
    );
    return holder
      ? c.json(
          {
            error: 'conflict',
            problems: [
              `agent ${id} is connected to instance ${holder.instance}: ask that instance (\`kici-admin cluster status\` lists its address)`,
            ],
          },
          409,
        )
      : undefined;
  };

  app.post('/api/v1/agents/:id/drain', async (c) => {
    const id = c.req.param('id');
    const found = find(id);
    if (!found) return (await elsewhere(c, id)) ?? notFound(c, 'agent', id);
    registry.hold(id);
    return c.json(agentView(dispatcher, deps.clock, found.a, found.gone));
  });

  app.post('/api/v1/agents/:id/resume', async (c) => {
    const id = c.req.param('id');
    const found = find(id);
    if (!found) return (await elsewhere(c, id)) ?? notFound(c, 'agent', id);
    // Only an operator's drain is lifted: an agent leaving on SIGTERM, or a warm agent being retired,
    // must not be handed new work.
    if (!registry.release(id) && found.a.draining && !found.gone)
      return c.json(
        {
          error: 'conflict',
          problems: [
            `agent ${id} is draining on its own (SIGTERM or retirement); only an operator drain can be resumed`,
          ],
        },
        409,
      );
    void dispatcher.requestPump();
    return c.json(agentView(dispatcher, deps.clock, found.a, found.gone));
  });
}
