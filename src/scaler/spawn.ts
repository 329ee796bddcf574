import { randomUUID } from 'node:crypto';
import { platformToTaints, type ScalerEntry } from '../config/index.js';
import { newToken } from '../store/tokens-repo.js';
import { errorMessage } from '../util/errors.js';
import { monoNow } from '../util/clock.js';
import type { ManagedEntry } from './agent-book.js';
import { isPending } from './agent-lifecycle.js';
import { backoffKey } from './core/backoff.js';
import { withDeadline } from './core/deadline.js';
import type { EffectiveResources } from './core/resources.js';
import { agentLabelsFor, type RoutableLabelSet } from './core/routing.js';
import { withSlot } from './core/semaphore.js';
import { armsBackoff, classifySpawnError, type ClassifiedSpawnError } from './core/spawn-errors.js';
import { claimEventSlot } from './event-cap.js';
import { recordWhenAsked } from './provisional-record.js';
import { PROVISION_IN_FLIGHT } from './core/decide.js';
import type { SpawnHost } from './lifecycle-port.js';
import type { ScaleJob, ScaleResult, ScalerBackend, ScalerEventType } from './types.js';

/**
 * One agent from decision to compute: the cap reservation, the spawn row and token written before
 * the backend is called (so a crash in between is recoverable), the backend call under the scaler's
 * slot and deadline, and the one way a spawn that will not produce an agent gives everything back.
 */

export const DEFAULT_SPAWN_TIMEOUT_MS = 300_000;
export const DEFAULT_AGENT_TOKEN_TTL_MS = 3_600_000;

/** The lifetime a spawned agent's token is minted with: the live setting, else the option. */
export function tokenTtlMs(opts: {
  liveAgentTokenTtlMs?: (() => number) | undefined;
  agentTokenTtlMs?: number | undefined;
}): number {
  return opts.liveAgentTokenTtlMs?.() ?? opts.agentTokenTtlMs ?? DEFAULT_AGENT_TOKEN_TTL_MS;
}

/** Reserve, record, and start one agent: bound to `job`, or a warm agent when there is none. */
export async function provisionAgent(
  host: SpawnHost,
  match: RoutableLabelSet,
  res: EffectiveResources,
  job?: ScaleJob,
): Promise<ScaleResult> {
  if (host.stopping) return { action: 'skipped', reason: 'orchestrator is draining' };
  const s = host.state;
  const entry = s.entries.get(match.scalerName)!;
  const backend = s.backends.get(match.scalerName);
  if (!backend)
    return { action: 'no-backend', reason: `scaler "${match.scalerName}" has no running backend` };
  const agentId = `scaler-${entry.type}-${randomUUID().slice(0, 8)}`;
  const cap = s.caps.reserve(
    { agentId, scalerName: entry.name, requests: res.requests, limits: res.limits },
    { global: s.globalActiveCount(), scaler: backend.getActiveCount() },
  );
  if (!cap.ok) return { action: 'at-capacity', reason: cap.reason };
  const now = host.opts.clock.now();
  const m: ManagedEntry = {
    agentId,
    scalerName: entry.name,
    type: entry.type,
    labelSet: match.declared,
    labelSetKey: match.key,
    fullLabels: agentLabelsFor(entry, match.declared),
    gate: match.gate,
    boundJobId: job?.id,
    runId: job?.runId,
    createdAtMs: now,
    phase: 'reserved',
    origin: { warm: !job },
    requests: res.requests,
    limits: res.limits,
    machinePool: entry.machinePool,
    abort: new AbortController(),
  };
  s.track(m);
  if (job) s.bindJob(job.id, agentId);
  if (entry.machinePool && host.opts.ledger) {
    const pool = await host.opts.ledger
      .tryReserve(entry.machinePool, agentId, res.requests.cpus, res.requests.memBytes)
      .catch((err: unknown) => ({
        ok: false as const,
        reason: `ledger unavailable: ${errorMessage(err)}`,
      }));
    if (!pool.ok) {
      host.forget(m);
      return { action: 'at-capacity', reason: `machine pool "${entry.machinePool}": ${pool.reason}` };
    }
  }
  // Provisions a peer may adopt are shared by every orchestrator on the store.
  const shared = backend.capabilities.peerAdoptable;
  let token: string;
  try {
    const record = {
      agentId,
      scalerName: entry.name,
      backendType: entry.type,
      labelSet: match.declared,
      labelSetKey: match.key,
      runId: job?.runId ?? null,
      boundJobId: job?.id ?? null,
      ownerInstanceId: host.opts.instanceId,
      mandatoryLabels: match.gate,
      spawnedAt: new Date(now),
      peerAdoptable: shared,
      // Recorded so whichever orchestrator adopts the agent sends its scale-down to the same place.
      ...(shared ? { provisioningTargets: [...(entry.provisioningTargets ?? [])] } : {}),
    };
    const reservation = { cpus: res.requests.cpus, memBytes: res.requests.memBytes };
    // Written before the backend is called, so a crash between deciding and spawning is recoverable.
    if (shared) {
      // The cap is counted on the store, where every orchestrator sees the same provisions.
      const slot = await claimEventSlot(host.opts.store.db, entry, record, reservation);
      if (slot.kind !== 'reserved') {
        if (slot.kind === 'at-cap') host.state.tally.spawnRefused();
        if (slot.kind === 'lock-failure') host.state.tally.capLockFailed(slot.failure);
        host.forget(m);
        if (slot.kind === 'in-flight') return { action: 'skipped', reason: PROVISION_IN_FLIGHT };
        if (slot.kind === 'at-cap') return { action: 'at-capacity', reason: slot.reason };
        host.log.warn({ scaler: entry.name, failure: slot.failure }, slot.reason);
        host.hooks?.onCapLockFailure?.(slot.failure);
        return { action: 'skipped', reason: slot.reason };
      }
      // The instance's agent redeems a claim code the backend issues; no token is minted here.
      void runSpawn(host, m, backend, entry, '', job?.container);
      return { action: 'spawning', agentId, scalerName: entry.name, backendType: entry.type };
    }
    // The record and the token commit together: the agent's start waits for one write, not two.
    const minted = newToken({
      agentId,
      labels: m.fullLabels,
      kind: 'ephemeral',
      ttlMs: tokenTtlMs(host.opts),
      now: new Date(now),
    });
    const tokens = host.opts.store.tokens;
    const { localCompute, cleansOrphans } = backend.capabilities;
    // Compute on this host whose backend finds it again without its record (a power loss would end
    // both) is launched while the record's sync runs; anything else waits until it is on disk.
    const write = async () => {
      const held = await host.opts.store.spawns.insertSpawnAndToken(record, reservation, minted.row);
      if (localCompute && cleansOrphans)
        held
          .durable()
          .catch((err: unknown) =>
            host.log.error({ err: errorMessage(err), agentId }, 'could not make a spawn record durable'),
          );
      else await held.durable();
    };
    if (host.launchesProvisionally(entry.name)) {
      // The backend starts the agent while the record is written (SpawnContext.record). The token
      // is known here first, so the agent's check can never come before it.
      tokens.stored(minted.row, new Date(now));
      const recordNow = recordWhenAsked(host, m, write);
      m.record = recordNow;
      let asked!: () => void;
      const launched = new Promise<void>((r) => (asked = r));
      const askRecord = () => (asked(), recordNow());
      void runSpawn(host, m, backend, entry, minted.token, job?.container, askRecord).finally(asked);
      return { action: 'spawning', agentId, scalerName: entry.name, backendType: entry.type, launched };
    }
    await write();
    tokens.stored(minted.row, new Date(now));
    token = minted.token;
  } catch (err) {
    host.log.error({ err: errorMessage(err), agentId }, 'could not record a spawn; not spawning');
    host.forget(m);
    void host.opts.store.spawns
      .deleteAgent(agentId)
      .catch((e: unknown) => host.noteSwallowed('scaler.spawn-record-delete', e, { agentId }));
    return { action: 'skipped', reason: `state store unavailable: ${errorMessage(err)}` };
  }
  void runSpawn(host, m, backend, entry, token, job?.container);
  return { action: 'spawning', agentId, scalerName: entry.name, backendType: entry.type };
}

async function runSpawn(
  host: SpawnHost,
  m: ManagedEntry,
  backend: ScalerBackend,
  entry: ScalerEntry,
  token: string,
  container: ScaleJob['container'],
  /** The spawn's record, written when the backend asks (SpawnContext.record); absent: written already. */
  record?: () => Promise<void>,
): Promise<void> {
  const timeoutMs = host.opts.spawnTimeoutMs ?? DEFAULT_SPAWN_TIMEOUT_MS;
  const limits = m.limits.cpus > 0 || m.limits.memBytes > 0 ? m.limits : undefined;
  try {
    const agent = await withSlot(
      host.state.semaphoreFor(entry),
      () => {
        // Torn down while it queued for a slot: never start compute for it.
        if (m.phase === 'destroying') throw new Error('agent torn down before its spawn began');
        host.move(m, 'spawning');
        m.spawnStartedAtMs = host.opts.clock.now();
        m.spawnStartedMono = monoNow(host.opts.clock);
        return withDeadline(
          timeoutMs,
          host.opts.clock,
          (signal) =>
            backend.spawn({
              agentId: m.agentId,
              labelSet: m.labelSet,
              fullLabels: m.fullLabels,
              mandatoryLabels: m.gate,
              taints: platformToTaints(entry.platform),
              orchestratorUrl: host.opts.orchestratorUrlFor(entry),
              auth: token ? { kind: 'token', token } : { kind: 'claim', code: '' },
              limits,
              boundJobId: m.boundJobId,
              runId: m.runId,
              image: container?.image,
              imageAuth: container?.auth,
              signal,
              onEvent: (type, detail) => onBackendEvent(host, m, type, detail),
              record,
            }),
          m.abort.signal,
          (m.registeredSignal ??= new AbortController()).signal,
        );
      },
      m.abort.signal,
    );
    // A backend that started the agent without asking for its record still gets it written (a
    // no-op when it asked): nothing may run on without one.
    await record?.();
    if (m.phase === 'spawning') host.move(m, 'starting');
    m.backendRef = agent.backendRef;
    if (m.phase === 'destroying') {
      // Torn down while the backend was still creating it: the compute must not outlive the entry.
      await backend.destroy(m.agentId, { reason: 'spawn-timeout' });
      return;
    }
    if (agent.backendRef) {
      host.opts.store.spawns.setBackendRef(m.agentId, agent.backendRef).catch((err: unknown) => {
        host.log.warn({ err: errorMessage(err), agentId: m.agentId }, 'could not record backend ref');
      });
    }
  } catch (err) {
    await failAgentSpawn(host, m, classifySpawnError(err));
  }
}

function onBackendEvent(host: SpawnHost, m: ManagedEntry, type: ScalerEventType, detail: string): void {
  const jobId = m.boundJobId;
  if (jobId) host.reportFor(jobId, () => host.hooks?.onJobEvent(jobId, type, detail));
  if (type === 'scaler.failed' && m.phase === 'starting') {
    void failAgentSpawn(host, m, { kind: 'exited-before-register', message: detail, deterministic: false });
  }
}

/** A spawn that will never produce a working agent: back off, tell the job, give everything back. */
export async function failAgentSpawn(
  host: SpawnHost,
  m: ManagedEntry,
  error: ClassifiedSpawnError,
): Promise<void> {
  if (host.state.agents.get(m.agentId) !== m || !isPending(m.phase)) return;
  const now = host.opts.clock.now();
  const key = backoffKey(m.scalerName, m.labelSetKey);
  // Only a failure that will repeat defers the label set; a transient one is retried at once. A
  // warm-pool spawn defers the set only when the host refused the launch outright: no job waits on
  // it, and its other failures must not hold back the jobs that do.
  const warmOnly = m.origin.warm && m.boundJobId === undefined;
  const st = host.state.backoff.recordFailure(
    key,
    now,
    m.agentId,
    { kind: error.kind, message: error.message },
    { transient: !armsBackoff(error), neverArm: warmOnly && !error.deterministic },
  );
  host.state.failures.record({
    scalerName: m.scalerName,
    backendType: m.type,
    bound: m.boundJobId !== undefined,
    kind: error.kind,
    detail: error.message,
    atMs: now,
  });
  host.log.warn(
    {
      agentId: m.agentId,
      scaler: m.scalerName,
      labelSet: m.labelSetKey,
      jobId: m.boundJobId,
      kind: error.kind,
      deterministic: error.deterministic,
      consecutive: st.consecutive,
      retryInMs: st.armed ? st.delayMs : 0,
    },
    `Scaler spawn failed: ${error.message}`,
  );
  if (st.becameConsistent) {
    host.log.error(
      { scaler: m.scalerName, labelSet: m.labelSetKey, consecutive: st.consecutive, kind: error.kind },
      `scaler "${m.scalerName}" label set [${m.labelSetKey}] is failing consistently: ` +
        `${st.consecutive} spawn failures in a row (last: ${error.kind}: ${error.message}); ` +
        '`kici-admin diagnose` shows the cause',
    );
  }
  const jobId = m.boundJobId;
  const source = { scalerName: m.scalerName, backendType: m.type };
  if (jobId) host.reportFor(jobId, () => host.hooks?.onSpawnFailed(jobId, error, source));
  m.abort.abort(new Error('spawn failed'));
  await host.teardown(m, error.kind === 'spawn-timeout' ? 'spawn-timeout' : 'spawn-failed');
}
