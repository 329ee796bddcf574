import type { WebSocket } from 'ws';
import { canonicalizeLabels } from '../config/index.js';
import { newConnectedAgent, type ConnectedAgent } from '../dispatch/agent-registry.js';
import type { Dispatcher } from '../dispatch/dispatcher.js';
import { LIMITS } from '../protocol/limits.js';
import { CloseCodes, SELF_REPORTED_PREFIXES, type OrchestratorMessage } from '../protocol/messages.js';
import { RegistrationRefused, type RegistrationResult } from '../scaler/manager.js';
import type { Store } from '../store/index.js';
import type { Clock } from '../util/clock.js';
import { errorMessage } from '../util/errors.js';
import type { Logger } from '../util/logger.js';
import {
  agentMessageSchema,
  describeIssues,
  registerSchema,
  type ValidAgentMessage,
} from './agent-messages.js';
import { closeWithin } from './ws-close.js';

export interface AgentSocketDeps {
  store: Store;
  dispatcher: Dispatcher;
  clock: Clock;
  logger: Logger;
  heartbeatIntervalMs: number;
  isStopping: () => boolean;
  /** Told once the agent is registered: the limits on unregistered connections no longer apply. */
  onRegistered?: () => void;
}

/** One agent connection: authenticate and register it, then route its messages to the dispatcher. */
export function handleAgentSocket(ws: WebSocket, deps: AgentSocketDeps, remote: string): void {
  const log = deps.logger.child({ component: 'agent-socket', remote });
  let agent: ConnectedAgent | undefined;
  const send = (msg: OrchestratorMessage) => {
    if (ws.readyState === ws.OPEN) ws.send(JSON.stringify(msg));
  };
  const reject = (code: number, reason: string, fields: Record<string, unknown> = {}) => {
    log.warn({ ...fields, code, reason }, 'agent refused');
    send({ type: 'register.rejected', code, reason });
    closeWithin(ws, code, reason);
  };
  const registerTimer = setTimeout(
    () => reject(CloseCodes.badMessage, `no register message within ${LIMITS.registerTimeoutMs / 1000}s`),
    LIMITS.registerTimeoutMs,
  );
  registerTimer.unref();
  // Messages are handled strictly in arrival order, even though handling awaits the store.
  let chain: Promise<void> = Promise.resolve();

  // ws has already closed the connection with 1002/1007/1009 when it reports an error; it is logged
  // here with the agent's id, when there is one.
  ws.on('error', (err: Error & { code?: string }) =>
    log.info({ agentId: agent?.id, code: err.code, err: err.message }, 'agent connection broke the protocol'),
  );

  ws.on('message', (data, isBinary) => {
    chain = chain.then(async () => {
      let raw: unknown;
      try {
        if (isBinary) throw new Error('binary frame');
        raw = JSON.parse(String(data));
      } catch {
        return reject(CloseCodes.badMessage, 'message is not a JSON text frame');
      }
      try {
        if (!agent) await onRegister(raw);
        else await onMessage(agent, raw);
      } catch (err) {
        log.error({ err: errorMessage(err), agentId: agent?.id }, 'agent message handling failed');
        // A registration that failed half-way (the store, say) must not leave an open, unregistered socket.
        if (!agent) closeWithin(ws, CloseCodes.internal, 'registration failed; retry');
      }
    });
  });

  ws.on('close', () => {
    clearTimeout(registerTimer);
    chain = chain
      .then(() => (agent ? onGone(agent) : undefined))
      .catch((err: unknown) =>
        log.error({ err: errorMessage(err), agentId: agent?.id }, 'agent cleanup failed'),
      );
  });

  async function onRegister(raw: unknown): Promise<void> {
    const parsed = registerSchema.safeParse(raw);
    if (!parsed.success)
      return reject(CloseCodes.badMessage, `invalid register message: ${describeIssues(parsed.error)}`);
    const msg = parsed.data;
    clearTimeout(registerTimer);
    if (deps.isStopping()) return reject(CloseCodes.shuttingDown, 'orchestrator is shutting down');
    const now = new Date(deps.clock.now());
    const check = await deps.store.tokens.check(msg.token, now);
    if (!check.ok) return reject(CloseCodes.unauthorized, check.reason, { agentId: msg.agentId });
    if (check.agentId !== msg.agentId) {
      return reject(CloseCodes.unauthorized, `token is not valid for agent id "${msg.agentId}"`, {
        agentId: msg.agentId,
      });
    }
    const labels = canonicalizeLabels(msg.labels);
    const scope = new Set(check.labels);
    const outside = labels.filter(
      (l) => !scope.has(l) && !SELF_REPORTED_PREFIXES.some((p) => l.startsWith(p)),
    );
    if (outside.length) {
      return reject(CloseCodes.forbidden, `labels outside the token's scope: ${outside.join(', ')}`, {
        agentId: msg.agentId,
      });
    }
    let scaled: RegistrationResult | null = null;
    const scaler = deps.dispatcher.scaler;
    if (check.kind === 'ephemeral' || msg.agentId.startsWith('scaler-')) {
      if (!scaler)
        return reject(CloseCodes.forbidden, 'no scaler is configured here', { agentId: msg.agentId });
      try {
        scaled = scaler.onAgentRegistered(msg.agentId);
      } catch (err) {
        if (err instanceof RegistrationRefused)
          return reject(CloseCodes.forbidden, err.message, { agentId: msg.agentId });
        log.error({ err: errorMessage(err), agentId: msg.agentId }, 'scaler lookup failed');
        ws.close(CloseCodes.internal, 'Scaler state unavailable');
        return;
      }
    }
    if (ws.readyState !== ws.OPEN) {
      if (scaled) await scaler?.onAgentDisconnected(msg.agentId);
      return;
    }
    const previous = deps.dispatcher.registry.get(msg.agentId);
    if (previous) previous.close(CloseCodes.duplicate, 'replaced by a newer connection of the same agent');
    agent = newConnectedAgent({
      id: msg.agentId,
      labels,
      scaled,
      // After a reconnect a single-use agent that already ran its job must not be offered another.
      jobsDone: msg.jobsDone,
      nowMs: deps.clock.now(),
      send,
      close: (code, reason) => ws.close(code, reason),
    });
    deps.dispatcher.registry.add(agent);
    deps.store.agents
      .connected({
        id: agent.id,
        kind: agent.kind,
        labels,
        scalerName: scaled?.scalerName ?? null,
        hostname: msg.hostname ?? null,
        version: msg.version ?? null,
        now,
      })
      .catch((err: unknown) => log.warn({ err: errorMessage(err) }, 'could not record agent'));
    deps.onRegistered?.();
    const resume = reattach(agent, msg.activeJobId);
    send({
      type: 'register.ack',
      agentId: agent.id,
      labels,
      scalerManaged: scaled !== null,
      pendingDispatch: scaled?.boundJobId !== undefined,
      warmPool: scaled?.warm ?? false,
      heartbeatIntervalMs: deps.heartbeatIntervalMs,
      acksResults: true,
      ...(resume ? { resumeJobId: resume } : {}),
    });
    log.info({ agentId: agent.id, kind: agent.kind, labels: labels.length }, 'agent registered');
    if (resume) return;
    if (scaled?.boundJobId) await deps.dispatcher.dispatchBound(agent.id, scaled.boundJobId);
    else void deps.dispatcher.requestPump();
  }

  /** After a reconnect: pick up the job the agent is still running, or settle the one it lost. */
  function reattach(a: ConnectedAgent, activeJobId: string | undefined): string | undefined {
    const d = deps.dispatcher;
    if (activeJobId) {
      const active = d.active.get(activeJobId);
      if (active && active.agentId === a.id) {
        if (active.orphanTimer) clearTimeout(active.orphanTimer);
        active.orphanTimer = undefined;
        a.busyJobId = activeJobId;
        a.jobsTaken = 1;
        return activeJobId;
      }
      // The orchestrator already settled it (timeout, cancel): tell the agent to stop.
      send({ type: 'job.cancel', jobId: activeJobId, reason: 'the orchestrator no longer expects this job' });
      a.jobsTaken = 1;
      return undefined;
    }
    for (const active of d.active.values()) {
      // The agent is back without the job: its result may still be in its outbox; give it a moment.
      if (active.agentId === a.id) d.orphan(active, 'agent reconnected without the job', 3_000);
    }
    return undefined;
  }

  async function onMessage(a: ConnectedAgent, raw: unknown): Promise<void> {
    const parsed = agentMessageSchema.safeParse(raw);
    if (!parsed.success) {
      const type = (raw as { type?: unknown } | null)?.type;
      log.warn(
        {
          agentId: a.id,
          type: typeof type === 'string' ? type.slice(0, 40) : undefined,
          problem: describeIssues(parsed.error),
        },
        'ignored an invalid agent message',
      );
      return;
    }
    a.lastSeenMs = deps.clock.now();
    const msg: ValidAgentMessage = parsed.data;
    const d = deps.dispatcher;
    const now = new Date(deps.clock.now());
    const mine = 'jobId' in msg && d.active.get(msg.jobId)?.agentId === a.id;
    switch (msg.type) {
      case 'heartbeat':
        return send({ type: 'heartbeat.ack' });
      case 'job.started':
        return d.onJobStarted(a.id, msg.jobId);
      case 'step.started':
        if (mine) await deps.store.logs.stepStarted(msg.jobId, msg.idx, msg.name, now);
        return;
      case 'log':
        if (mine)
          d.logs.push(
            msg.lines.map((line) => ({
              jobId: msg.jobId,
              stepIdx: msg.idx,
              stream: msg.stream,
              line,
              ts: now,
            })),
          );
        return;
      case 'step.finished':
        if (mine) await deps.store.logs.stepFinished(msg.jobId, msg.idx, msg.exitCode, msg.timedOut, now);
        return;
      case 'job.finished':
        // Ack only once the result is stored: until then the agent keeps it and re-sends it after a reconnect.
        if (await d.onJobFinished(a.id, msg.jobId, msg.result, msg.exitCode, msg.message))
          send({ type: 'job.finished.ack', jobId: msg.jobId });
        return;
      case 'agent.draining':
        a.draining = true; // offered no new job; it leaves after the current one
        return;
      case 'job.rejected': {
        const active = d.active.get(msg.jobId);
        if (a.busyJobId === msg.jobId) a.busyJobId = undefined;
        if (active?.agentId === a.id && active.state === 'dispatched')
          await d.requeue(active, `agent refused it: ${msg.reason}`);
        return;
      }
    }
  }

  async function onGone(a: ConnectedAgent): Promise<void> {
    const d = deps.dispatcher;
    if (d.registry.get(a.id) !== a) return; // replaced by a newer connection
    d.registry.remove(a.id, a);
    deps.store.agents.gone(a.id, new Date(deps.clock.now())).catch(() => {});
    log.info({ agentId: a.id }, 'agent disconnected');
    if (deps.isStopping()) return;
    for (const active of [...d.active.values()]) {
      if (active.agentId !== a.id) continue;
      // A single-use agent cannot come back; a static one gets a grace period to reconnect.
      if (a.kind === 'scaler') {
        await d.loseJob(active, `scaler-managed agent ${a.id} disconnected`);
      } else d.orphan(active, 'agent disconnected');
    }
    await d.scaler?.onAgentDisconnected(a.id, a.closedFor);
    void d.requestPump();
  }
}
