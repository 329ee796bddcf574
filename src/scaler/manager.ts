import { randomUUID } from 'node:crypto';
import { normalizeLabelSet, type ScalerConfig, type ScalerEntry } from '../config/index.js';
import type { Store } from '../store/index.js';
import type { Clock, TimerHandle } from '../util/clock.js';
import { errorMessage } from '../util/errors.js';
import type { Logger } from '../util/logger.js';
import { phaseOf, type ManagedEntry } from './agent-book.js';
import { backoffKey, DEFAULT_PROVISION_BACKOFF, ProvisionBackoff, type ProvisionBackoffOptions } from './core/backoff.js';
import { CapBook, type CapLimits } from './core/caps.js';
import { withDeadline } from './core/deadline.js';
import { FailureTracker } from './core/failure-tracker.js';
import { resolveResources } from './core/resources.js';
import { agentLabelsFor, buildRoutingTable, describeTable, findLabelSet, type RoutableLabelSet } from './core/routing.js';
import { Semaphore, withSlot } from './core/semaphore.js';
import { classifySpawnError, type ClassifiedSpawnError } from './core/spawn-errors.js';
import type { ScaleJob, ScaleResult, ScalerBackend, ScalerEventType } from './types.js';

export const DEFAULT_SPAWN_TIMEOUT_MS = 300_000;
export const DEFAULT_AGENT_TOKEN_TTL_MS = 3_600_000;
const CAPACITY_FREED_DEBOUNCE_MS = 25;

export interface ScalerHooks {
  /** Capacity came back: waiting jobs should be offered again. */
  onCapacityFreed(): void;
  /** A lifecycle note for the job a spawn is bound to. */
  onJobEvent(jobId: string, type: ScalerEventType, detail: string): void;
  /** A spawn bound to this job failed; the classified reason belongs on the waiting job. */
  onSpawnFailed(jobId: string, error: ClassifiedSpawnError): void;
}

export interface ScalerManagerOptions {
  config: ScalerConfig;
  backends: ScalerBackend[];
  store: Store;
  clock: Clock;
  logger: Logger;
  instanceId: string;
  /** The URL spawned agents dial, per scaler (C.12 resolution happens in the caller). */
  orchestratorUrlFor: (entry: ScalerEntry) => string;
  spawnTimeoutMs?: number;
  agentTokenTtlMs?: number;
  backoff?: ProvisionBackoffOptions;
  isDraining?: () => boolean;
}

export class RegistrationRefused extends Error {}

export interface RegistrationResult {
  scalerName: string;
  boundJobId: string | undefined;
  gate: string[];
  labels: string[];
}

/**
 * The thin async shell around the pure decision core: it asks the core where a job goes and whether
 * caps allow it, persists the spawn record, and runs the backend call under the scaler's spawn
 * semaphore and deadline. Every outcome flows back into the core (reservation released, backoff armed).
 */
export class ScalerManager {
  config: ScalerConfig;
  readonly backoff: ProvisionBackoff;
  readonly failures = new FailureTracker();
  private readonly backends = new Map<string, ScalerBackend>();
  private readonly entriesByName = new Map<string, ScalerEntry>();
  private readonly agents = new Map<string, ManagedEntry>();
  private readonly jobToAgent = new Map<string, string>();
  private readonly semaphores = new Map<string, Semaphore>();
  private readonly caps: CapBook;
  private table: RoutableLabelSet[];
  private hooks: ScalerHooks | undefined;
  private freedTimer: TimerHandle | undefined;
  private readonly log: Logger;

  constructor(private readonly opts: ScalerManagerOptions) {
    this.config = opts.config;
    this.log = opts.logger.child({ component: 'scaler' });
    this.backoff = new ProvisionBackoff({ ...DEFAULT_PROVISION_BACKOFF, ...opts.backoff });
    for (const b of opts.backends) this.backends.set(b.name, b);
    for (const e of opts.config.scalers) this.entriesByName.set(e.name, e);
    this.caps = new CapBook(this.capLimits());
    this.table = buildRoutingTable(opts.config);
  }

  setHooks(hooks: ScalerHooks): void {
    this.hooks = hooks;
  }

  get instanceId(): string {
    return this.opts.instanceId;
  }

  private capLimits(): CapLimits {
    return {
      globalMaxAgents: this.config.globalMaxAgents,
      globalResourceCap: this.config.globalResourceCap,
      scalers: new Map(this.config.scalers.map((s) => [s.name, { maxAgents: s.maxAgents, resourceCap: s.resourceCap }])),
    };
  }

  globalActiveCount(): number {
    let n = 0;
    for (const b of this.backends.values()) n += b.getActiveCount();
    return n;
  }

  /** Is a spawn for this job in flight (reserved, spawning or not yet registered)? */
  isProvisioning(jobId: string): boolean {
    return this.jobToAgent.has(jobId);
  }

  /** Could any label set serve these labels at all (ignoring caps and backoff)? */
  canRoute(job: Pick<ScaleJob, 'runsOn' | 'role'>): boolean {
    return findLabelSet({ labels: job.runsOn, role: job.role }, this.table) !== undefined;
  }

  route(job: Pick<ScaleJob, 'runsOn' | 'role'>): RoutableLabelSet | undefined {
    return findLabelSet({ labels: job.runsOn, role: job.role }, this.table);
  }

  async requestScale(job: ScaleJob): Promise<ScaleResult> {
    if (this.opts.isDraining?.()) return { action: 'skipped', reason: 'orchestrator is draining' };
    if (this.jobToAgent.has(job.id)) return { action: 'skipped', reason: 'provision-in-flight' };
    const match = this.route(job);
    if (!match) {
      const reason = `no scaler label set matches [${job.runsOn.join(',')}]; ${describeTable(this.table)}`;
      return { action: 'no-backend', reason };
    }
    const now = this.opts.clock.now();
    const held = this.backoff.check(backoffKey(match.scalerName, match.key), now);
    if (held.blocked) return { action: 'skipped', reason: held.reason, retryAfterMs: held.retryAfterMs };
    const entry = this.entriesByName.get(match.scalerName)!;
    const backend = this.backends.get(match.scalerName);
    if (!backend) return { action: 'no-backend', reason: `scaler "${match.scalerName}" has no running backend` };
    const ls = entry.labelSets[match.index]!;
    const res = resolveResources(job.resources, ls.resources, this.config.defaults?.resources);
    const agentId = `scaler-${entry.type}-${randomUUID().slice(0, 8)}`;
    const cap = this.caps.reserve(
      { agentId, scalerName: entry.name, requests: res.requests, limits: res.limits },
      { global: this.globalActiveCount(), scaler: backend.getActiveCount() },
    );
    if (!cap.ok) return { action: 'at-capacity', reason: cap.reason };
    this.jobToAgent.set(job.id, agentId);
    const managed: ManagedEntry = {
      agentId,
      scalerName: entry.name,
      type: entry.type,
      labelSet: match.declared,
      labelSetKey: match.key,
      fullLabels: agentLabelsFor(entry, match.declared),
      gate: match.gate,
      boundJobId: job.id,
      runId: job.runId,
      createdAtMs: now,
      settled: false,
      registered: false,
      recovered: false,
      abort: new AbortController(),
    };
    this.agents.set(agentId, managed);
    let token: string;
    try {
      // Written before the backend is called, so a crash between deciding and spawning is recoverable.
      await this.opts.store.spawns.insertSpawn(
        {
          agentId,
          scalerName: entry.name,
          backendType: entry.type,
          labelSet: match.declared,
          runId: job.runId,
          boundJobId: job.id,
          ownerInstanceId: this.opts.instanceId,
          mandatoryLabels: match.gate,
          spawnedAt: new Date(now),
        },
        { cpus: res.requests.cpus, memBytes: res.requests.memBytes },
      );
      token = (
        await this.opts.store.tokens.mint({
          agentId,
          labels: managed.fullLabels,
          kind: 'ephemeral',
          ttlMs: this.opts.agentTokenTtlMs ?? DEFAULT_AGENT_TOKEN_TTL_MS,
          now: new Date(now),
        })
      ).token;
    } catch (err) {
      this.log.error({ err: errorMessage(err), agentId }, 'could not record a spawn; not spawning');
      this.forget(managed);
      void this.opts.store.spawns.deleteAgent(agentId).catch(() => {});
      return { action: 'skipped', reason: `state store unavailable: ${errorMessage(err)}` };
    }
    void this.runSpawn(managed, backend, entry, res.limits, token);
    return { action: 'spawning', agentId, scalerName: entry.name, backendType: entry.type };
  }

  private semaphoreFor(entry: ScalerEntry): Semaphore {
    let sem = this.semaphores.get(entry.name);
    if (!sem) {
      sem = new Semaphore(entry.maxConcurrentSpawns);
      this.semaphores.set(entry.name, sem);
    }
    return sem;
  }

  private async runSpawn(
    m: ManagedEntry,
    backend: ScalerBackend,
    entry: ScalerEntry,
    limits: { cpus: number; memBytes: number },
    token: string,
  ): Promise<void> {
    const timeoutMs = this.opts.spawnTimeoutMs ?? DEFAULT_SPAWN_TIMEOUT_MS;
    try {
      const agent = await withSlot(
        this.semaphoreFor(entry),
        () => {
          m.spawnStartedAtMs = this.opts.clock.now();
          return withDeadline(
            timeoutMs,
            this.opts.clock,
            (signal) =>
              backend.spawn({
                agentId: m.agentId,
                labelSet: m.labelSet,
                fullLabels: m.fullLabels,
                orchestratorUrl: this.opts.orchestratorUrlFor(entry),
                token,
                limits: limits.cpus > 0 || limits.memBytes > 0 ? limits : undefined,
                boundJobId: m.boundJobId,
                runId: m.runId,
                signal,
                onEvent: (type, detail) => this.onBackendEvent(m, type, detail),
              }),
            m.abort.signal,
          );
        },
        m.abort.signal,
      );
      m.settled = true;
      m.backendRef = agent.backendRef;
      if (this.agents.get(m.agentId) !== m) {
        // Torn down while the backend was still creating it: the compute must not outlive the entry.
        await backend.destroy(m.agentId, { reason: 'spawn-timeout' });
        return;
      }
      if (agent.backendRef) {
        this.opts.store.spawns.setBackendRef(m.agentId, agent.backendRef).catch((err: unknown) => {
          this.log.warn({ err: errorMessage(err), agentId: m.agentId }, 'could not record backend ref');
        });
      }
    } catch (err) {
      await this.failSpawn(m, classifySpawnError(err));
    }
  }

  private onBackendEvent(m: ManagedEntry, type: ScalerEventType, detail: string): void {
    if (m.boundJobId) this.hooks?.onJobEvent(m.boundJobId, type, detail);
    if (type === 'scaler.failed' && m.settled && !m.registered) {
      void this.failSpawn(m, { kind: 'exited-before-register', message: detail, deterministic: false });
    }
  }

  /** A spawn that will never produce a working agent: back off, tell the job, give everything back. */
  private async failSpawn(m: ManagedEntry, error: ClassifiedSpawnError): Promise<void> {
    if (this.agents.get(m.agentId) !== m || m.registered) return;
    const now = this.opts.clock.now();
    const state = this.backoff.recordFailure(backoffKey(m.scalerName, m.labelSetKey), now, m.agentId, {
      kind: error.kind,
      message: error.message,
    });
    this.failures.record({
      scalerName: m.scalerName,
      backendType: m.type,
      bound: m.boundJobId !== undefined,
      kind: error.kind,
      detail: error.message,
      atMs: now,
    });
    this.log.warn(
      {
        agentId: m.agentId,
        scaler: m.scalerName,
        labelSet: m.labelSetKey,
        jobId: m.boundJobId,
        kind: error.kind,
        consecutive: state.consecutive,
        retryInMs: state.delayMs,
      },
      `Scaler spawn failed: ${error.message}`,
    );
    if (m.boundJobId) this.hooks?.onSpawnFailed(m.boundJobId, error);
    m.abort.abort(new Error('spawn failed'));
    await this.teardown(m, 'spawn-failed');
  }

  /** Destroy compute (idempotent), drop every record of the agent, release its reservation. */
  private async teardown(m: ManagedEntry, reason: 'spawn-failed' | 'disconnected' | 'shutdown' | 'spawn-timeout'): Promise<void> {
    this.forget(m);
    const backend = this.backends.get(m.scalerName);
    try {
      await backend?.destroy(m.agentId, { reason });
    } catch (err) {
      this.log.warn({ err: errorMessage(err), agentId: m.agentId }, 'destroy failed');
    }
    await this.opts.store.spawns.deleteAgent(m.agentId).catch((err: unknown) => {
      this.log.warn({ err: errorMessage(err), agentId: m.agentId }, 'could not delete spawn record');
    });
    await this.opts.store.tokens.revokeForAgent(m.agentId, new Date(this.opts.clock.now())).catch(() => {});
    this.notifyCapacityFreed();
  }

  private forget(m: ManagedEntry): void {
    if (this.agents.get(m.agentId) === m) this.agents.delete(m.agentId);
    if (m.boundJobId && this.jobToAgent.get(m.boundJobId) === m.agentId) this.jobToAgent.delete(m.boundJobId);
    this.caps.release(m.agentId);
  }

  notifyCapacityFreed(): void {
    if (this.freedTimer) return;
    this.freedTimer = this.opts.clock.setTimer(CAPACITY_FREED_DEBOUNCE_MS, () => {
      this.freedTimer = undefined;
      try {
        this.hooks?.onCapacityFreed();
      } catch (err) {
        this.log.error({ err: errorMessage(err) }, 'capacity-freed hook failed');
      }
    });
  }

  /**
   * An agent presented a scaler id. Known → its gate and bound job. Unknown `scaler-` id → refused
   * (registering it as static would drop its gate), and its compute is reclaimed where evidence exists.
   */
  onAgentRegistered(agentId: string): RegistrationResult | null {
    const m = this.agents.get(agentId);
    if (!m) {
      if (agentId.startsWith('scaler-')) {
        this.log.warn({ agentId }, 'no spawn record for a scaler-managed agent; refusing registration');
        throw new RegistrationRefused('no spawn record for this scaler agent id');
      }
      return null;
    }
    const first = !m.registered;
    m.registered = true;
    m.recovered = false;
    if (first) {
      if (m.boundJobId && this.jobToAgent.get(m.boundJobId) === agentId) this.jobToAgent.delete(m.boundJobId);
      this.backends.get(m.scalerName)?.markRegistered?.(agentId);
      if (this.backoff.recordSuccess(backoffKey(m.scalerName, m.labelSetKey))) {
        this.log.info({ scaler: m.scalerName, labelSet: m.labelSetKey }, 'scaler recovered: an agent registered');
      }
      this.opts.store.spawns.markRegistered(agentId, new Date(this.opts.clock.now())).catch(() => {});
    }
    return { scalerName: m.scalerName, boundJobId: first ? m.boundJobId : undefined, gate: m.gate, labels: m.fullLabels };
  }

  isManaged(agentId: string): boolean {
    return this.agents.has(agentId);
  }

  /** Single-use agents: any disconnect of a registered agent ends its compute. */
  async onAgentDisconnected(agentId: string): Promise<void> {
    const m = this.agents.get(agentId);
    if (!m || !m.registered) return;
    await this.teardown(m, 'disconnected');
  }

  /**
   * After a restart: re-adopt this instance's agents whose compute is provably still there (they
   * may reconnect), reclaim the rest, and rebuild cap usage from the stored reservations.
   */
  async recover(reconnectWindowMs = 60_000): Promise<{ adopted: number; reclaimed: number; dropped: number }> {
    const counts = { adopted: 0, reclaimed: 0, dropped: 0 };
    const rows = await this.opts.store.spawns.listOwned(this.opts.instanceId);
    const reservations = new Map(
      (await this.opts.store.spawns.listReservations(this.opts.instanceId)).map((r) => [r.agent_id, r]),
    );
    for (const row of rows) {
      const backend = this.backends.get(row.scaler_name);
      const entry = this.entriesByName.get(row.scaler_name);
      const adopted =
        backend && entry && row.backend_ref ? await backend.adopt?.(row.agent_id, row.label_set, row.backend_ref) : false;
      if (!adopted || !entry) {
        const reclaimed = (await backend?.reapUnowned?.(row.agent_id, row.backend_ref).catch(() => false)) ?? false;
        if (reclaimed) counts.reclaimed++;
        else counts.dropped++;
        await this.opts.store.spawns.deleteAgent(row.agent_id);
        await this.opts.store.tokens.revokeForAgent(row.agent_id, new Date(this.opts.clock.now())).catch(() => {});
        continue;
      }
      const r = reservations.get(row.agent_id);
      const m: ManagedEntry = {
        agentId: row.agent_id,
        scalerName: row.scaler_name,
        type: entry.type,
        labelSet: row.label_set,
        labelSetKey: normalizeLabelSet(row.label_set),
        fullLabels: agentLabelsFor(entry, row.label_set),
        gate: row.mandatory_labels,
        boundJobId: row.bound_job_id ?? undefined,
        runId: row.run_id ?? undefined,
        createdAtMs: row.spawned_at.getTime(),
        spawnStartedAtMs: row.spawned_at.getTime(),
        settled: true,
        registered: false,
        recovered: true,
        backendRef: row.backend_ref ?? '',
        abort: new AbortController(),
      };
      this.agents.set(m.agentId, m);
      if (m.boundJobId && !row.registered_at) this.jobToAgent.set(m.boundJobId, m.agentId);
      const amount = { cpus: r?.cpu_units ?? 0, memBytes: Number(r?.mem_bytes ?? 0) };
      this.caps.add({ agentId: m.agentId, scalerName: m.scalerName, requests: amount, limits: amount });
      counts.adopted++;
    }
    this.opts.clock.setTimer(reconnectWindowMs, () => {
      for (const m of this.agents.values()) {
        if (m.recovered && !m.registered) {
          this.log.warn({ agentId: m.agentId }, 'recovered agent did not reconnect; reclaiming it');
          void this.teardown(m, 'spawn-timeout');
        }
      }
    });
    return counts;
  }

  /** Backstop for agents that were started but never registered (wrong URL, hung start-up). */
  sweepStale(): void {
    const limit = this.opts.spawnTimeoutMs ?? DEFAULT_SPAWN_TIMEOUT_MS;
    const now = this.opts.clock.now();
    for (const m of this.agents.values()) {
      if (m.settled && !m.registered && !m.recovered && now - (m.spawnStartedAtMs ?? m.createdAtMs) > limit) {
        void this.failSpawn(m, {
          kind: 'spawn-timeout',
          message: `agent ${m.agentId} started but did not register within ${Math.round(limit / 1000)}s`,
          deterministic: false,
        });
      }
    }
  }

  entries(): ManagedEntry[] {
    return [...this.agents.values()];
  }

  capBook(): CapBook {
    return this.caps;
  }

  backendList(): ScalerBackend[] {
    return [...this.backends.values()];
  }

  routingTable(): readonly RoutableLabelSet[] {
    return this.table;
  }

  spawningCount(): number {
    let n = 0;
    for (const m of this.agents.values()) if (phaseOf(m) !== 'registered') n++;
    return n;
  }

  /** Stop everything this manager started. Never hangs longer than the grace. */
  async shutdownAll(graceMs = 15_000): Promise<void> {
    if (this.freedTimer) this.freedTimer.cancel();
    this.hooks = undefined;
    for (const m of this.agents.values()) m.abort.abort(new Error('shutting down'));
    const all = [...this.agents.values()].map((m) => this.teardown(m, 'shutdown'));
    const backends = [...this.backends.values()].map((b) => b.shutdownAll());
    let timer: NodeJS.Timeout | undefined;
    const grace = new Promise<'timeout'>((r) => (timer = setTimeout(() => r('timeout'), graceMs)));
    const outcome = await Promise.race([Promise.allSettled([...all, ...backends]), grace]);
    clearTimeout(timer);
    if (outcome === 'timeout') this.log.error('Scaler backends still stopping their agents after the shutdown grace');
  }
}
