import { randomUUID } from 'node:crypto';
import {
  canonicalizeLabels,
  platformToTaints,
  type ScalerConfig,
  type ScalerEntry,
} from '../config/index.js';
import type { Store } from '../store/index.js';
import type { Clock, TimerHandle } from '../util/clock.js';
import { errorMessage } from '../util/errors.js';
import type { Logger } from '../util/logger.js';
import { isWarmStock, type ManagedEntry } from './agent-book.js';
import { hasRegistered, isPending, transition, type AgentPhase } from './agent-lifecycle.js';
import { backoffKey, type ProvisionBackoffOptions } from './core/backoff.js';
import { decide, type DecideState, type Decision, type PoolView } from './core/decide.js';
import { withDeadline } from './core/deadline.js';
import { resolveResources, type EffectiveResources } from './core/resources.js';
import {
  agentLabelsFor,
  describeTable,
  findLabelSet,
  noMatchReason,
  type RoutableLabelSet,
  type RouteQuery,
} from './core/routing.js';
import { withSlot } from './core/semaphore.js';
import { armsBackoff, classifySpawnError, type ClassifiedSpawnError } from './core/spawn-errors.js';
import type { MachineLedger } from './ledger/machine-ledger.js';
import type { ReloadHost, RecoveryHost, TeardownReason, WarmPoolHost } from './lifecycle-port.js';
import { recoverAgents } from './recovery.js';
import { applyReload, type BackendFactory, type ReloadOutcome } from './reload.js';
import { ScalerState } from './state.js';
import type { DestroyReason, ScaleJob, ScaleResult, ScalerBackend, ScalerEventType } from './types.js';
import { WarmPools, type RegistryView } from './warm-pool.js';
import { reserveEventSpawn } from './event-cap.js';
import { Adoptions } from './adoption.js';
import type { ScalerEventEmitterLike } from './events/payloads.js';

export { ScalerAdoptionLookupError } from './adoption.js';

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
  /**
   * An error the manager logged and carried on from (cleanup that may fail without harm), by site;
   * for a counter. The manager logs it either way.
   */
  onSwallowedError?(site: string, err: unknown): void;
  /** A spawned agent registered, this long after the spawn was decided (a latency histogram). */
  onAgentRegistered?(scalerName: string, backendType: string, latencyMs: number): void;
}

export interface ScalerManagerOptions {
  config: ScalerConfig;
  backends: ScalerBackend[];
  store: Store;
  clock: Clock;
  logger: Logger;
  instanceId: string;
  /** The URL spawned agents dial, per scaler. */
  orchestratorUrlFor: (entry: ScalerEntry) => string;
  spawnTimeoutMs?: number;
  agentTokenTtlMs?: number;
  backoff?: ProvisionBackoffOptions;
  ledger?: MachineLedger | undefined;
  isDraining?: () => boolean;
  /** Sends the scale-down of an adopted event agent whose scaler is not configured here. */
  scaleEvents?: ScalerEventEmitterLike | undefined;
}

export class RegistrationRefused extends Error {}

export interface RegistrationResult {
  scalerName: string;
  boundJobId: string | undefined;
  gate: string[];
  labels: string[];
  warm: boolean;
}

/**
 * The thin async shell around the pure decision core: it asks the core where a job goes and whether
 * caps allow it, persists the spawn record, and runs the backend call under the scaler's spawn
 * semaphore and deadline. Every outcome flows back into the core (reservation released, backoff armed).
 */
export class ScalerManager implements RecoveryHost, ReloadHost, WarmPoolHost {
  readonly state: ScalerState;
  readonly warm: WarmPools;
  /** Event agents spawned by a peer (or by us) that registered here: the row says who answers for them. */
  readonly adoption: Adoptions;
  /** Adoption lookups the store failed (the agent was refused and retries). */
  adoptionLookupFailures = 0;
  private hooks: ScalerHooks | undefined;
  private freedTimer: TimerHandle | undefined;
  /** Set by a graceful stop: no spawn of any kind (bound or warm) from then on. */
  private draining = false;
  private readonly swallowed = new Map<string, number>();
  readonly log: Logger;
  /** Lifecycle moves the table refused: each one is a bug, logged when it happens. */
  illegalTransitions = 0;

  constructor(readonly opts: ScalerManagerOptions) {
    this.state = new ScalerState(opts.config, opts.backends, opts.backoff);
    this.log = opts.logger.child({ component: 'scaler' });
    this.warm = new WarmPools(this, opts.clock, this.log);
    this.adoption = new Adoptions(this);
  }

  get config(): ScalerConfig {
    return this.state.config;
  }
  get backoff() {
    return this.state.backoff;
  }
  get failures() {
    return this.state.failures;
  }
  get instanceId(): string {
    return this.opts.instanceId;
  }

  setHooks(hooks: ScalerHooks, registry?: RegistryView): void {
    this.hooks = hooks;
    if (registry) this.warm.setRegistry(registry);
  }

  globalActiveCount(): number {
    return this.state.globalActiveCount();
  }

  /** Is a spawn for this job in flight (reserved, spawning or not yet registered)? */
  isProvisioning(jobId: string): boolean {
    return this.state.jobToAgent.has(jobId);
  }

  route(
    job: Pick<ScaleJob, 'runsOn' | 'role' | 'excludeLabels' | 'container'>,
  ): RoutableLabelSet | undefined {
    return findLabelSet(this.routeQuery(job), this.state.table);
  }

  /** Why `route` found nothing for this job, in words (shared by the planner, requestScale and explain). */
  noRouteReason(job: Pick<ScaleJob, 'runsOn' | 'role' | 'excludeLabels' | 'container'>): string {
    return noMatchReason(this.routeQuery(job), this.state.table);
  }

  private routeQuery(job: Pick<ScaleJob, 'runsOn' | 'role' | 'excludeLabels' | 'container'>): RouteQuery {
    const exclude = job.excludeLabels ? canonicalizeLabels(job.excludeLabels) : undefined;
    return { labels: canonicalizeLabels(job.runsOn), role: job.role, exclude, image: job.container?.image };
  }

  resourcesFor(match: RoutableLabelSet, job?: ScaleJob): EffectiveResources {
    const entry = this.state.entries.get(match.scalerName)!;
    return resolveResources(
      job?.resources,
      entry.labelSets[match.index]?.resources,
      this.config.defaults?.resources,
    );
  }

  /** The facts the decision reads, as they are now. `pools`: ledger usage read just before. */
  decisionState(job?: ScaleJob, pools?: ReadonlyMap<string, PoolView>): DecideState {
    const s = this.state;
    return {
      now: this.opts.clock.now(),
      draining: this.draining || !!this.opts.isDraining?.(),
      table: s.table,
      isProvisioning: (id) => s.jobToAgent.has(id),
      backoff: (key, now) => s.backoff.check(key, now),
      streak: (key) => s.backoff.streak(key),
      hasBackend: (name) => s.backends.has(name),
      requests: (m) => this.resourcesFor(m, job).requests,
      caps: s.caps,
      live: (name) => ({
        global: s.globalActiveCount(),
        scaler: s.backends.get(name)?.getActiveCount() ?? 0,
      }),
      machinePool: (name) => (this.opts.ledger ? s.entries.get(name)?.machinePool : undefined),
      pool: pools && ((name) => pools.get(name)),
    };
  }

  /** The one decision for this job over the state as it is now (synchronous; no ledger read). */
  decideNow(job: ScaleJob, pools?: ReadonlyMap<string, PoolView>): Decision {
    return decide({ id: job.id, ...this.routeQuery(job) }, this.decisionState(job, pools));
  }

  /** Ledger usage of the machine pool this job would draw from, when there is one. */
  async poolViewsFor(job: ScaleJob): Promise<ReadonlyMap<string, PoolView> | undefined> {
    const ledger = this.opts.ledger;
    const match = ledger && this.route(job);
    const pool = match && this.state.entries.get(match.scalerName)?.machinePool;
    if (!ledger || !pool) return undefined;
    try {
      return new Map([[pool, await ledger.usage(pool)]]);
    } catch (err) {
      return new Map([[pool, { error: errorMessage(err) }]]);
    }
  }

  /** What `requestScale` would decide for this job now, without acting (scaler explain). */
  async decideFor(job: ScaleJob): Promise<Decision> {
    return this.decideNow(job, await this.poolViewsFor(job));
  }

  async requestScale(job: ScaleJob): Promise<ScaleResult> {
    // Only a machine pool makes the decision wait (for the ledger). Without one nothing awaits
    // between the in-flight gate and the reservation, so two requests for one job cannot both pass.
    const pools = this.opts.ledger ? await this.poolViewsFor(job) : undefined;
    const d = this.decideNow(job, pools);
    switch (d.action) {
      case 'spawn':
        return this.provision(d.match!, this.resourcesFor(d.match!, job), job);
      case 'backoff':
        return { action: 'skipped', reason: d.reason, retryAfterMs: d.retryAfterMs ?? 0 };
      case 'skip':
        return { action: 'skipped', reason: d.reason };
      case 'at-capacity':
        return { action: 'at-capacity', reason: d.reason };
      case 'no-backend':
        return {
          action: 'no-backend',
          reason: d.match ? d.reason : `${d.reason}; ${describeTable(this.state.table)}`,
        };
    }
  }

  /** The job waits on a cap: retire an idle warm agent of another label set if that frees room. */
  yieldWarmFor(job: ScaleJob, match: RoutableLabelSet): boolean {
    if (this.draining) return false;
    return this.warm.yieldTo(job.id, match, this.resourcesFor(match, job).requests);
  }

  /** Reserve, record, and start one agent: bound to `job`, or a warm agent when there is none. */
  async provision(match: RoutableLabelSet, res: EffectiveResources, job?: ScaleJob): Promise<ScaleResult> {
    if (this.draining) return { action: 'skipped', reason: 'orchestrator is draining' };
    const s = this.state;
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
    const now = this.opts.clock.now();
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
    s.agents.set(agentId, m);
    if (job) s.jobToAgent.set(job.id, agentId);
    if (entry.machinePool && this.opts.ledger) {
      const pool = await this.opts.ledger
        .tryReserve(entry.machinePool, agentId, res.requests.cpus, res.requests.memBytes)
        .catch((err: unknown) => ({
          ok: false as const,
          reason: `ledger unavailable: ${errorMessage(err)}`,
        }));
      if (!pool.ok) {
        this.forget(m);
        return { action: 'at-capacity', reason: `machine pool "${entry.machinePool}": ${pool.reason}` };
      }
    }
    let token: string;
    try {
      const record = {
        agentId,
        scalerName: entry.name,
        backendType: entry.type,
        labelSet: match.declared,
        runId: job?.runId ?? null,
        boundJobId: job?.id ?? null,
        ownerInstanceId: this.opts.instanceId,
        mandatoryLabels: match.gate,
        spawnedAt: new Date(now),
        // Recorded so whichever orchestrator adopts the agent sends its scale-down to the same place.
        ...(entry.type === 'event' ? { provisioningTargets: [...(entry.provisioningTargets ?? [])] } : {}),
      };
      const reservation = { cpus: res.requests.cpus, memBytes: res.requests.memBytes };
      // Written before the backend is called, so a crash between deciding and spawning is recoverable.
      if (entry.type === 'event') {
        // Event provisions are shared by every orchestrator on the store: the cap is counted there.
        const refused = await reserveEventSpawn(this.opts.store.db, entry, record, reservation);
        if (refused) {
          this.forget(m);
          return { action: 'at-capacity', reason: refused };
        }
        // The instance's agent redeems a claim code the backend issues; no token is minted here.
        void this.runSpawn(m, backend, entry, '', job?.container?.image);
        return { action: 'spawning', agentId, scalerName: entry.name, backendType: entry.type };
      }
      await this.opts.store.spawns.insertSpawn(record, reservation);
      token = (
        await this.opts.store.tokens.mint({
          agentId,
          labels: m.fullLabels,
          kind: 'ephemeral',
          ttlMs: this.opts.agentTokenTtlMs ?? DEFAULT_AGENT_TOKEN_TTL_MS,
          now: new Date(now),
        })
      ).token;
    } catch (err) {
      this.log.error({ err: errorMessage(err), agentId }, 'could not record a spawn; not spawning');
      this.forget(m);
      void this.opts.store.spawns
        .deleteAgent(agentId)
        .catch((e: unknown) => this.noteSwallowed('scaler.spawn-record-delete', e, { agentId }));
      return { action: 'skipped', reason: `state store unavailable: ${errorMessage(err)}` };
    }
    void this.runSpawn(m, backend, entry, token, job?.container?.image);
    return { action: 'spawning', agentId, scalerName: entry.name, backendType: entry.type };
  }

  private async runSpawn(
    m: ManagedEntry,
    backend: ScalerBackend,
    entry: ScalerEntry,
    token: string,
    image: string | undefined,
  ): Promise<void> {
    const timeoutMs = this.opts.spawnTimeoutMs ?? DEFAULT_SPAWN_TIMEOUT_MS;
    const limits = m.limits.cpus > 0 || m.limits.memBytes > 0 ? m.limits : undefined;
    try {
      const agent = await withSlot(
        this.state.semaphoreFor(entry),
        () => {
          // Torn down while it queued for a slot: never start compute for it.
          if (m.phase === 'destroying') throw new Error('agent torn down before its spawn began');
          this.move(m, 'spawning');
          m.spawnStartedAtMs = this.opts.clock.now();
          return withDeadline(
            timeoutMs,
            this.opts.clock,
            (signal) =>
              backend.spawn({
                agentId: m.agentId,
                labelSet: m.labelSet,
                fullLabels: m.fullLabels,
                mandatoryLabels: m.gate,
                taints: platformToTaints(entry.platform),
                orchestratorUrl: this.opts.orchestratorUrlFor(entry),
                auth: token ? { kind: 'token', token } : { kind: 'claim', code: '' },
                limits,
                boundJobId: m.boundJobId,
                runId: m.runId,
                image,
                signal,
                onEvent: (type, detail) => this.onBackendEvent(m, type, detail),
              }),
            m.abort.signal,
            (m.registeredSignal ??= new AbortController()).signal,
          );
        },
        m.abort.signal,
      );
      if (m.phase === 'spawning') this.move(m, 'starting');
      m.backendRef = agent.backendRef;
      if (m.phase === 'destroying') {
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
    if (type === 'scaler.failed' && m.phase === 'starting') {
      void this.failSpawn(m, { kind: 'exited-before-register', message: detail, deterministic: false });
    }
  }

  /** A spawn that will never produce a working agent: back off, tell the job, give everything back. */
  async failSpawn(m: ManagedEntry, error: ClassifiedSpawnError): Promise<void> {
    if (this.state.agents.get(m.agentId) !== m || !isPending(m.phase)) return;
    const now = this.opts.clock.now();
    const key = backoffKey(m.scalerName, m.labelSetKey);
    // Only a failure that will repeat defers the label set; a transient one is retried at once.
    const st = this.state.backoff.recordFailure(
      key,
      now,
      m.agentId,
      { kind: error.kind, message: error.message },
      { transient: !armsBackoff(error) },
    );
    this.state.failures.record({
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
        deterministic: error.deterministic,
        consecutive: st.consecutive,
        retryInMs: st.armed ? st.delayMs : 0,
      },
      `Scaler spawn failed: ${error.message}`,
    );
    if (st.becameConsistent) {
      this.log.error(
        { scaler: m.scalerName, labelSet: m.labelSetKey, consecutive: st.consecutive, kind: error.kind },
        `scaler "${m.scalerName}" label set [${m.labelSetKey}] is failing consistently: ` +
          `${st.consecutive} spawn failures in a row (last: ${error.kind}: ${error.message}); ` +
          '`kici-admin diagnose` shows the cause',
      );
    }
    if (m.boundJobId) this.hooks?.onSpawnFailed(m.boundJobId, error);
    m.abort.abort(new Error('spawn failed'));
    await this.teardown(m, error.kind === 'spawn-timeout' ? 'spawn-timeout' : 'spawn-failed');
  }

  /** Destroy compute (idempotent), drop every record of the agent, release its reservation. */
  async teardown(m: ManagedEntry, reason: TeardownReason): Promise<void> {
    // A second teardown of the same agent (a racing disconnect, reap or sweep) has nothing to do.
    if (m.phase === 'destroying') return;
    this.forget(m);
    const backend = this.state.backends.get(m.scalerName);
    try {
      await backend?.destroy(m.agentId, { reason });
    } catch (err) {
      this.log.warn({ err: errorMessage(err), agentId: m.agentId }, 'destroy failed');
    }
    await this.opts.store.spawns.deleteAgent(m.agentId).catch((err: unknown) => {
      this.log.warn({ err: errorMessage(err), agentId: m.agentId }, 'could not delete spawn record');
    });
    await this.opts.store.tokens
      .revokeForAgent(m.agentId, new Date(this.opts.clock.now()))
      .catch((e: unknown) => this.noteSwallowed('scaler.token-revoke', e, { agentId: m.agentId }));
    this.sweepRetired();
    this.notifyCapacityFreed();
  }

  /** Forget an agent in memory and give its capacity back (synchronously, so caps see it at once). */
  forget(m: ManagedEntry): void {
    if (m.phase !== 'destroying') this.move(m, 'destroying');
    const s = this.state;
    if (s.agents.get(m.agentId) === m) s.agents.delete(m.agentId);
    if (m.boundJobId && s.jobToAgent.get(m.boundJobId) === m.agentId) s.jobToAgent.delete(m.boundJobId);
    if (s.caps.release(m.agentId) && m.machinePool && this.opts.ledger) {
      const pool = m.machinePool;
      this.opts.ledger
        .release(pool, m.agentId)
        .catch((e: unknown) => this.noteSwallowed('scaler.ledger-release', e, { agentId: m.agentId, pool }));
    }
  }

  /**
   * An error we carry on from (cleanup whose failure harms nothing now, or that a later sweep
   * redoes): logged with its context, counted per site, and passed to the hook for a metric.
   */
  noteSwallowed(site: string, err: unknown, context: Record<string, unknown> = {}): void {
    this.swallowed.set(site, (this.swallowed.get(site) ?? 0) + 1);
    this.log.warn({ ...context, site, err: errorMessage(err) }, `scaler carried on after an error (${site})`);
    try {
      this.hooks?.onSwallowedError?.(site, err);
    } catch (hookErr) {
      this.log.error({ site, err: errorMessage(hookErr) }, 'swallowed-error hook failed');
    }
  }

  /** How many errors were carried on from, per site, since start. */
  swallowedErrors(): Record<string, number> {
    return Object.fromEntries(this.swallowed);
  }

  /** Every phase change goes through the table; a refused one is logged and counted, then thrown. */
  private move(m: ManagedEntry, to: AgentPhase): void {
    transition(m, to, (err) => {
      this.illegalTransitions++;
      this.log.error(
        { agentId: m.agentId, from: err.from, to: err.to },
        'illegal agent lifecycle transition',
      );
    });
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
   * An agent presented a scaler id. Known → its gate and bound job. Unknown `scaler-` id → refused:
   * registering it as static would drop its gate.
   */
  onAgentRegistered(agentId: string): RegistrationResult | null {
    const m = this.state.agents.get(agentId);
    if (!m) {
      if (agentId.startsWith('scaler-')) {
        this.log.warn({ agentId }, 'no spawn record for a scaler-managed agent; refusing registration');
        throw new RegistrationRefused('no spawn record for this scaler agent id');
      }
      return null;
    }
    if (m.phase === 'reserved') throw new RegistrationRefused('this agent has not been spawned yet');
    const first = isPending(m.phase);
    if (first) {
      // An adopted agent that had registered before the restart may already hold a job.
      this.move(m, m.origin.recovered?.registeredBefore ? 'busy' : 'registered');
      m.registeredAtMs = this.opts.clock.now();
      (m.registeredSignal ??= new AbortController()).abort();
      if (m.boundJobId && this.state.jobToAgent.get(m.boundJobId) === agentId)
        this.state.jobToAgent.delete(m.boundJobId);
      this.state.backends.get(m.scalerName)?.markRegistered?.(agentId);
      // Adopted agents were spawned before the restart: their wait says nothing about this run.
      if (!m.origin.recovered)
        this.hooks?.onAgentRegistered?.(m.scalerName, m.type, m.registeredAtMs - m.createdAtMs);
      if (this.state.backoff.recordSuccess(backoffKey(m.scalerName, m.labelSetKey))) {
        this.log.info(
          { scaler: m.scalerName, labelSet: m.labelSetKey },
          'scaler recovered: an agent registered',
        );
      }
      this.opts.store.spawns
        .markRegistered(agentId, new Date(this.opts.clock.now()))
        .catch((e: unknown) => this.noteSwallowed('scaler.spawn-mark-registered', e, { agentId }));
    }
    return {
      scalerName: m.scalerName,
      boundJobId: first ? m.boundJobId : undefined,
      gate: m.gate,
      labels: m.fullLabels,
      warm: isWarmStock(m),
    };
  }

  /**
   * Registration with the shared store's say (spec C.11): a local-backend agent this instance spawned
   * completes at once; an event agent (ours or a peer's) is first adopted through its spawn row, so
   * exactly one orchestrator answers for it; an unknown or another host's `scaler-` id is refused.
   * Throws ScalerAdoptionLookupError when the store cannot answer (refuse, reclaim nothing).
   */
  async registerAgent(agentId: string): Promise<RegistrationResult | null> {
    const m = this.state.agents.get(agentId);
    if (!agentId.startsWith('scaler-') || (m && (m.type !== 'event' || m.phase === 'reserved')))
      return this.onAgentRegistered(agentId);
    // Already registered here (a replaced connection): the row is ours already.
    if (m && !isPending(m.phase)) return this.onAgentRegistered(agentId);
    const out = await this.adoption.adopt(agentId);
    if (out.kind === 'refused') {
      this.log.warn({ agentId, reason: out.reason }, 'scaler agent refused');
      throw new RegistrationRefused(out.reason);
    }
    if (out.row.ownerInstanceId !== this.instanceId)
      this.log.info(
        {
          agentId,
          scaler: out.row.scalerName,
          spawnedBy: out.row.ownerInstanceId,
          configured: out.configured,
        },
        'adopted an event agent spawned by another orchestrator',
      );
    if (out.configured) return this.onAgentRegistered(agentId);
    const bound = out.row.registeredBefore ? undefined : (out.row.boundJobId ?? undefined);
    return {
      scalerName: out.row.scalerName,
      boundJobId: bound,
      gate: out.row.mandatoryLabels,
      labels: out.row.labelSet,
      warm: out.row.boundJobId === null,
    };
  }

  /** Read by `kici_orch_scaler_adoption_lookup_failures_total` on each scrape. */
  onAdoptionLookupFailed(): void {
    this.adoptionLookupFailures++;
  }

  /** The dispatcher handed a job to one of our agents: a warm agent is no longer idle stock. */
  onJobAssigned(agentId: string): void {
    const m = this.state.agents.get(agentId);
    if (m?.phase !== 'registered') return;
    const stock = isWarmStock(m);
    this.move(m, 'busy');
    if (stock) this.warm.replenishSoon();
  }

  /** Can this scaler agent take a job of this shape? Only warm agents can be the wrong size. */
  agentFits(agentId: string, job: ScaleJob): boolean {
    const m = this.state.agents.get(agentId);
    // A process-mode agent may see a container runtime on its host, but it runs steps on the host.
    if (m && job.container && this.runsHostProcesses(m)) return false;
    if (!m || !m.origin.warm) return true;
    const declared = job.resources;
    if (!declared) return true;
    const want = resolveResources(declared, undefined, undefined);
    for (const side of ['requests', 'limits'] as const) {
      const d = declared[side] ?? declared[side === 'requests' ? 'limits' : 'requests'];
      if (d?.cpus !== undefined && want[side].cpus !== m[side].cpus) return false;
      if (d?.memory !== undefined && want[side].memBytes !== m[side].memBytes) return false;
    }
    return true;
  }

  private runsHostProcesses(m: ManagedEntry): boolean {
    return !!this.state.table.find((t) => t.scalerName === m.scalerName && t.key === m.labelSetKey)
      ?.hostProcess;
  }

  isManaged(agentId: string): boolean {
    return this.state.agents.has(agentId);
  }

  /**
   * Single-use agents: any disconnect of a registered agent ends its compute. `reason` says why the
   * socket closed when the orchestrator closed it (heartbeat timeout); a plain disconnect otherwise.
   */
  async onAgentDisconnected(
    agentId: string,
    reason: Extract<DestroyReason, 'disconnected' | 'heartbeat-timeout' | 'job-complete'> = 'disconnected',
  ): Promise<void> {
    const m = this.state.agents.get(agentId);
    if (!m && this.adoption.has(agentId)) return this.adoption.teardown(agentId, reason);
    if (!m || !hasRegistered(m.phase)) return;
    await this.teardown(m, reason);
  }

  recover(reconnectWindowMs = 60_000) {
    return recoverAgents(this, reconnectWindowMs);
  }

  reload(config: ScalerConfig, factory: BackendFactory): Promise<ReloadOutcome> {
    return applyReload(this, config, factory);
  }

  /** A removed scaler's backend goes away once its last agent has. */
  sweepRetired(): void {
    for (const name of [...this.state.retiring.keys()]) {
      const backend = this.state.backends.get(name);
      if (this.state.agentsOf(name).length > 0 || (backend && backend.getActiveCount() > 0)) continue;
      this.state.retiring.delete(name);
      this.state.backends.delete(name);
      this.state.entries.delete(name);
      this.state.semaphores.delete(name);
      this.state.caps.setLimits(this.state.capLimits());
      void backend?.shutdownAll();
      this.log.info({ scaler: name }, 'scaler retired');
    }
  }

  /** Backstop for agents that were started but never registered (wrong URL, hung start-up). */
  sweepStale(): void {
    const limit = this.opts.spawnTimeoutMs ?? DEFAULT_SPAWN_TIMEOUT_MS;
    const now = this.opts.clock.now();
    for (const m of this.state.agents.values()) {
      // Cluster-lifetime provisions are reaped by the one instance holding the reaper lease.
      if (this.state.backends.get(m.scalerName)?.capabilities.lifetime === 'cluster') continue;
      if (m.phase === 'starting' && now - (m.spawnStartedAtMs ?? m.createdAtMs) > limit) {
        void this.failSpawn(m, {
          kind: 'spawn-timeout',
          message: `agent ${m.agentId} started but did not register within ${Math.round(limit / 1000)}s`,
          deterministic: false,
        });
      }
    }
    this.sweepRetired();
  }

  entries(): ManagedEntry[] {
    return [...this.state.agents.values()];
  }
  /** Configured scalers, then removed ones still draining their agents (and since when). */
  scalerEntries(): { entry: ScalerEntry; retiringSinceMs: number | undefined }[] {
    const s = this.state;
    const retiring = [...s.retiring].flatMap(([name, since]) => {
      const entry = s.entries.get(name);
      return entry ? [{ entry, retiringSinceMs: since }] : [];
    });
    return [...s.config.scalers.map((entry) => ({ entry, retiringSinceMs: undefined })), ...retiring];
  }
  capBook() {
    return this.state.caps;
  }
  backendList(): ScalerBackend[] {
    return [...this.state.backends.values()];
  }
  routingTable(): readonly RoutableLabelSet[] {
    return this.state.table;
  }
  spawningCount(): number {
    let n = 0;
    for (const m of this.state.agents.values()) if (isPending(m.phase)) n++;
    return n;
  }

  /** Graceful stop: no more spawns, warm pools stop refilling; agents already there keep running. */
  drain(): void {
    this.draining = true;
    this.warm.stop();
  }

  /**
   * Stop everything this manager started. Never hangs longer than the grace. Agents in `keep` (they
   * hold a running job) are left alive with their spawn records and tokens, so the next start adopts
   * them exactly as after a crash. `drain` marks the end of a graceful stop, `shutdown` a plain one.
   */
  async shutdownAll(
    graceMs = 15_000,
    keep?: ReadonlySet<string>,
    reason: Extract<DestroyReason, 'shutdown' | 'drain'> = 'shutdown',
  ): Promise<void> {
    this.drain();
    this.freedTimer?.cancel();
    this.hooks = undefined;
    // Agents of a cluster-lifetime backend belong to the cluster: this orchestrator stopping leaves them be.
    const clusterOwned = (m: ManagedEntry) =>
      this.state.backends.get(m.scalerName)?.capabilities.lifetime === 'cluster';
    const going = [...this.state.agents.values()].filter((m) => !keep?.has(m.agentId) && !clusterOwned(m));
    for (const m of going) m.abort.abort(new Error('shutting down'));
    const all = going.map((m) => this.teardown(m, reason));
    // A backend's own shutdown stops every agent it tracks, so it only runs when none is kept.
    const backends = keep ? [] : [...this.state.backends.values()].map((b) => b.shutdownAll());
    let timer: NodeJS.Timeout | undefined;
    const grace = new Promise<'timeout'>((r) => (timer = setTimeout(() => r('timeout'), graceMs)));
    const outcome = await Promise.race([Promise.allSettled([...all, ...backends]), grace]);
    clearTimeout(timer);
    if (outcome === 'timeout')
      this.log.error('Scaler backends still stopping their agents after the shutdown grace');
    // Kept agents keep their machine-pool reservations; torn-down ones released theirs above.
    if (!keep)
      await this.opts.ledger
        ?.releaseAllForInstance()
        .catch((e: unknown) =>
          this.noteSwallowed('scaler.ledger-release-all', e, { instanceId: this.instanceId }),
        );
    await this.opts.ledger?.stop();
  }
}
