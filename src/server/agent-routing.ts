import type { ConnectedAgent } from '../dispatch/agent-registry.js';
import type { ActiveJob, Dispatcher } from '../dispatch/dispatcher.js';
import { CloseCodes, type OrchestratorMessage } from '../protocol/messages.js';
import type { Store } from '../store/index.js';
import type { Clock } from '../util/clock.js';
import type { Logger } from '../util/logger.js';
import { retryWrite } from '../util/retry-write.js';
import { swallow } from '../util/swallowed-errors.js';
import type { ValidAgentMessage } from './agent-messages.js';

/** What a registered agent's messages reach: the dispatcher and the store. */
export interface RoutingDeps {
  store: Store;
  dispatcher: Dispatcher;
  clock: Clock;
  isStopping: () => boolean;
  /** How long a scaler agent told to leave after its job may take before it is cut off. */
  leaveGraceMs?: number | undefined;
}

/** Long enough to flush a result and close cleanly; short enough that idle compute is not paid for. */
export const DEFAULT_LEAVE_GRACE_MS = 10_000;

/**
 * A scaler agent has run the one job it was started for. Whether it leaves by itself depends on its
 * environment, which a provisioner may have got wrong; the orchestrator does not rely on that. It is
 * told to leave, and its connection is cut after a grace if it stays. Either close reaches the scaler
 * as `job-complete`, which tears the compute down.
 */
export function dismissSingleUse(
  deps: RoutingDeps,
  a: ConnectedAgent,
  send: (m: OrchestratorMessage) => void,
): void {
  if (a.kind !== 'scaler' || a.closedFor || deps.isStopping()) return;
  a.closing('job-complete');
  send({ type: 'shutdown', reason: 'single-use agent: its job is done' });
  deps.clock.setTimer(deps.leaveGraceMs ?? DEFAULT_LEAVE_GRACE_MS, () => {
    if (deps.dispatcher.registry.get(a.id) === a)
      a.close(CloseCodes.forbidden, 'single-use agent: its job is done and it did not leave');
  });
}

/** After a reconnect: pick up the job the agent is still running, or settle the one it lost. */
export function reattach(
  d: Dispatcher,
  a: ConnectedAgent,
  activeJobId: string | undefined,
  send: (m: OrchestratorMessage) => void,
): string | undefined {
  if (activeJobId) {
    const active = d.active.get(activeJobId);
    if (active && active.agentId === a.id) {
      d.active.agentReturned(active);
      a.resume(activeJobId);
      return activeJobId;
    }
    // The orchestrator already settled it (timeout, cancel): tell the agent to stop.
    send({ type: 'job.cancel', jobId: activeJobId, reason: 'the orchestrator no longer expects this job' });
    a.spend();
    return undefined;
  }
  for (const active of d.active.values()) {
    // The agent is back without the job: its result may still be in its outbox; give it a moment.
    if (active.agentId === a.id) d.active.orphan(active, 'agent reconnected without the job', 3_000);
  }
  return undefined;
}

/**
 * Clustering: the registering agent runs a job another instance dispatched (that instance died,
 * or the agent's link moved here); take it over. The held job, when taken. A store error is thrown:
 * the connection is closed and the agent asked to retry, and the registration keeps its scaler
 * entry for that retry (agent-registration.ts), so nothing is undone here.
 */
export async function adoptMovedJob(
  d: Dispatcher,
  agentId: string,
  jobId: string | undefined,
): Promise<ActiveJob | undefined> {
  if (!jobId) return undefined;
  return (await d.active.adoptFromPeer(agentId, jobId)) ? d.active.get(jobId) : undefined;
}

/** One checked message from a registered agent. */
export async function routeMessage(
  deps: RoutingDeps,
  a: ConnectedAgent,
  msg: ValidAgentMessage,
  send: (m: OrchestratorMessage) => void,
): Promise<void> {
  const d = deps.dispatcher;
  const now = new Date(deps.clock.now());
  const mine = 'jobId' in msg && d.active.get(msg.jobId)?.agentId === a.id;
  switch (msg.type) {
    case 'heartbeat':
      return send({ type: 'heartbeat.ack' });
    case 'job.started':
      return d.active.onJobStarted(a.id, msg.jobId);
    case 'step.started':
      // A step row is stored only after the output that came before it: a reader that sees the
      // row then has every line the step follows (the log renderer frames steps by these rows).
      if (mine) void d.logs.flush().then(() => d.active.stepStarted(msg.jobId, msg.idx, msg.name, now));
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
      if (mine)
        void d.logs
          .flush()
          .then(() => d.active.stepFinished(msg.jobId, msg.idx, msg.exitCode, msg.timedOut, now));
      return;
    case 'job.finished': {
      // Ack only once the result is stored: until then the agent keeps it and re-sends it after a reconnect.
      const store = () => d.active.onJobFinished(a.id, msg.jobId, msg.result, msg.exitCode, msg.message);
      const stored = () => {
        send({ type: 'job.finished.ack', jobId: msg.jobId });
        dismissSingleUse(deps, a, send);
      };
      if (await store()) return stored();
      // The store is away. An agent that stays connected would never re-send: retry for it, off
      // this connection's message chain so its heartbeats are still answered meanwhile.
      void retryWrite(
        store,
        () => !deps.isStopping() && d.registry.get(a.id) === a,
        () => undefined,
      ).then((ok) => ok && stored());
      return;
    }
    case 'agent.draining':
      a.drain(); // offered no new job; it leaves after the current one
      return;
    case 'job.rejected': {
      const active = d.active.get(msg.jobId);
      a.freeFrom(msg.jobId);
      if (active?.agentId === a.id && active.state === 'dispatched')
        await d.active.requeue(active, `agent refused it: ${msg.reason}`);
      return;
    }
  }
}

/** The registered agent's connection closed. */
export async function agentGone(deps: RoutingDeps, a: ConnectedAgent, log: Logger): Promise<void> {
  const d = deps.dispatcher;
  if (d.registry.get(a.id) !== a) return; // replaced by a newer connection
  d.registry.remove(a.id, a, deps.clock.now());
  deps.store.agents
    .gone(a.id, new Date(deps.clock.now()))
    .catch(swallow(log, 'agent.record-gone', { agentId: a.id }));
  log.info({ agentId: a.id }, 'agent disconnected');
  if (deps.isStopping()) return;
  for (const active of [...d.active.values()]) {
    if (active.agentId !== a.id) continue;
    // A single-use agent cannot come back; a static one gets a grace period to reconnect.
    if (a.kind === 'scaler') {
      await d.active.loseJob(active, `scaler-managed agent ${a.id} disconnected`);
    } else d.active.orphan(active, 'agent disconnected');
  }
  await d.scaler?.onAgentDisconnected(a.id, a.closedFor);
  void d.requestPump();
}
