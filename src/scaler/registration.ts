import { isWarmStock, type ManagedEntry } from './agent-book.js';
import { isPending, type AgentPhase } from './agent-lifecycle.js';
import type { Adoptions } from './adoption.js';
import { backoffKey } from './core/backoff.js';
import type { AgentLifecycle } from './lifecycle-port.js';
import type { ReturnWatch } from './registration-return.js';
import type { LaterWork } from './types.js';

/** Why a registered agent's spawn deadline is disarmed (nothing reads it). */
const REGISTERED = 'the agent registered';
/**
 * A spawned agent says who it is: the manager's record gives its gate, labels and bound job, and
 * the first registration ends the spawn (backoff cleared, latency reported). An event agent is
 * adopted through its spawn row first, so exactly one orchestrator answers for it.
 */

/** What registration may touch of the manager. */
export interface RegistrationHost extends AgentLifecycle {
  readonly instanceId: string;
  readonly adoption: Adoptions;
  /** Agents whose registration failed on the server's side after it was counted here. */
  readonly returns: ReturnWatch;
  readonly hooks:
    { onAgentRegistered?(scalerName: string, backendType: string, latencyMs: number): void } | undefined;
  move(m: ManagedEntry, to: AgentPhase): void;
  noteSwallowed(site: string, err: unknown, context?: Record<string, unknown>): void;
}

export class RegistrationRefused extends Error {}

/** Does the work at once: where no session holds it back. */
export const atOnce: LaterWork = (work) => work();

export interface RegistrationResult {
  scalerName: string;
  boundJobId: string | undefined;
  gate: string[];
  labels: string[];
  warm: boolean;
}

/**
 * An agent presented a scaler id. Known → its gate and bound job. Unknown `scaler-` id → refused:
 * registering it as static would drop its gate.
 */
export function completeRegistration(
  host: RegistrationHost,
  agentId: string,
  later: LaterWork = atOnce,
): RegistrationResult | null {
  const m = host.state.agents.get(agentId);
  if (!m) {
    if (agentId.startsWith('scaler-')) {
      host.log.warn({ agentId }, 'no spawn record for a scaler-managed agent; refusing registration');
      throw new RegistrationRefused('no spawn record for this scaler agent id');
    }
    return null;
  }
  if (m.phase === 'reserved') throw new RegistrationRefused('this agent has not been spawned yet');
  const first = isPending(m.phase);
  if (first) {
    // An adopted agent that had registered before the restart may already hold a job.
    host.move(m, m.origin.recovered?.registeredBefore ? 'busy' : 'registered');
    m.registeredAtMs = host.opts.clock.now();
    // A reason given: abort() without one builds a DOMException and its stack, on the way to the job.
    (m.registeredSignal ??= new AbortController()).abort(REGISTERED);
    if (m.boundJobId) host.state.releaseJob(m.boundJobId, agentId);
    host.state.backends.get(m.scalerName)?.markRegistered?.(agentId, later);
    // Adopted agents were spawned before the restart: their wait says nothing about this run.
    if (!m.origin.recovered)
      host.hooks?.onAgentRegistered?.(m.scalerName, m.type, m.registeredAtMs - m.createdAtMs);
    if (host.state.backoff.recordSuccess(backoffKey(m.scalerName, m.labelSetKey))) {
      host.log.info(
        { scaler: m.scalerName, labelSet: m.labelSetKey },
        'scaler recovered: an agent registered',
      );
    }
    // The stamp only tells a restart that the agent had registered (recovery.ts); the agent's job
    // does not wait for it. On the embedded database it would run between the hello and the claim.
    const at = new Date(host.opts.clock.now());
    later(() => {
      host.opts.store.spawns
        .markRegistered(agentId, at)
        .catch((e: unknown) => host.noteSwallowed('scaler.spawn-mark-registered', e, { agentId }));
    });
  }
  return {
    scalerName: m.scalerName,
    // An agent back after its registration failed half-way has not had the job handed to it then.
    boundJobId: first ? m.boundJobId : host.returns.back(agentId),
    gate: m.gate,
    labels: m.fullLabels,
    warm: isWarmStock(m),
  };
}

/**
 * Registration with the shared store's say: a local-backend agent this instance spawned completes
 * at once; an event agent (ours or a peer's) is first adopted through its spawn row, so exactly one
 * orchestrator answers for it; an unknown or another host's `scaler-` id is refused. Throws
 * ScalerAdoptionLookupError when the store cannot answer (refuse, reclaim nothing).
 */
export async function registerThroughStore(
  host: RegistrationHost,
  agentId: string,
  later: LaterWork = atOnce,
): Promise<RegistrationResult | null> {
  const m = host.state.agents.get(agentId);
  // Started while its record was being written: not taken in before the record exists, since its
  // launcher would undo it should this process die first. A write that fails is logged where it
  // fails (provisional-record.ts) and tears the spawn down, so the state read below refuses the
  // agent: nothing is left to do with the error here.
  if (m?.record) await m.record().catch(() => undefined);
  const shared = m && host.state.backends.get(m.scalerName)?.capabilities.peerAdoptable;
  if (!agentId.startsWith('scaler-') || (m && (!shared || m.phase === 'reserved')))
    return completeRegistration(host, agentId, later);
  // Already registered here (a replaced connection): the row is ours already.
  if (m && !isPending(m.phase)) return completeRegistration(host, agentId, later);
  // An adopted agent back after a failed registration: its grace stops while this one runs, and
  // the job its failed registration was handed is its own (below). Should the adoption fail, the
  // server refuses the agent without telling the scaler, so the wait resumes here: were it left
  // stopped, an agent that then never came back would never be ended.
  const waited = host.returns.back(agentId);
  const out = await host.adoption.adopt(agentId).catch((err: unknown) => {
    host.returns.retryFailed(agentId, waited);
    throw err;
  });
  if (out.kind === 'refused') {
    host.returns.retryFailed(agentId, waited);
    host.log.warn({ agentId, reason: out.reason }, 'scaler agent refused');
    throw new RegistrationRefused(out.reason);
  }
  if (out.row.ownerInstanceId !== host.instanceId)
    host.log.info(
      {
        agentId,
        scaler: out.row.scalerName,
        spawnedBy: out.row.ownerInstanceId,
        configured: out.configured,
      },
      'adopted an event agent spawned by another orchestrator',
    );
  if (out.configured) return completeRegistration(host, agentId, later);
  // A retry's row says it registered before (the failed attempt's adoption stamped it), so the row
  // names no job: the one its failed registration was handed comes from the wait.
  const bound = waited ?? (out.row.registeredBefore ? undefined : (out.row.boundJobId ?? undefined));
  return {
    scalerName: out.row.scalerName,
    boundJobId: bound,
    gate: out.row.mandatoryLabels,
    labels: out.row.labelSet,
    warm: out.row.boundJobId === null,
  };
}
