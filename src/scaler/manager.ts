import { canonicalizeLabels, type ScalerConfig, type ScalerEntry } from '../config/index.js';
import type { Store } from '../store/index.js';
import { monoNow, type Clock, type TimerHandle } from '../util/clock.js';
import { errorMessage } from '../util/errors.js';
import type { Logger } from '../util/logger.js';
import { isWarmStock, type ManagedEntry } from './agent-book.js';
import { hasRegistered, isPending, transition, type AgentPhase } from './agent-lifecycle.js';
import type { ProvisionBackoffOptions } from './core/backoff.js';
import { decide, type DecideState, type Decision, type PoolView } from './core/decide.js';
import { resolveResources, type EffectiveResources } from './core/resources.js';
import {
  describeTable,
  findLabelSet,
  noMatchReason,
  type RoutableLabelSet,
  type RouteQuery,
} from './core/routing.js';
import type { ClassifiedSpawnError } from './core/spawn-errors.js';
import type { MachineLedger } from './ledger/machine-ledger.js';
import type { ReloadHost, RecoveryHost, SpawnHost, TeardownReason, WarmPoolHost } from './lifecycle-port.js';
import { DEFAULT_SPAWN_TIMEOUT_MS, failAgentSpawn, provisionAgent, tokenTtlMs } from './spawn.js';
import { completeRegistration, registerThroughStore, type RegistrationResult } from './registration.js';
import { recoverAgents } from './recovery.js';
import { applyReload, type BackendFactory, type ReloadOutcome } from './reload.js';
import { ScalerState } from './state.js';
import type { DestroyReason, ScaleJob, ScaleResult, ScalerBackend, ScalerEventType } from './types.js';
import { WarmPools, type RegistryView } from './warm-pool.js';
import { withdrawEndedProvisions } from './withdrawal.js';
import { Adoptions } from './adoption.js';
import type { ScalerEventEmitterLike } from './events/payloads.js';

export { ScalerAdoptionLookupError } from './adoption.js';
export { RegistrationRefused, type RegistrationResult } from './registration.js';

export { DEFAULT_AGENT_TOKEN_TTL_MS, DEFAULT_SPAWN_TIMEOUT_MS } from './spawn.js';
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
  /** The cluster cap lock of an event scaler could not be taken (lock timeout, or a database error). */
  onCapLockFailure?(reason: 'contended' | 'unreachable'): void;
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
  /** The token lifetime as it stands now (cluster settings), read per spawn over the fixed one. */
  liveAgentTokenTtlMs?: () => number;
  backoff?: ProvisionBackoffOptions;
  ledger?: MachineLedger | undefined;
  isDraining?: () => boolean;
  /** Sends the scale-down of an adopted event agent whose scaler is not configured here. */
  scaleEvents?: ScalerEventEmitterLike | undefined;
}

/**
 * The thin async shell around the pure decision core: it asks the core where a job goes and whether
 * caps allow it, persists the spawn record, and runs the backend call under the scaler's spawn
 * semaphore and deadline. Every outcome flows back into the core (reservation released, backoff armed).
 */
export class ScalerManager implements RecoveryHost, ReloadHost, WarmPoolHost, SpawnHost {
  readonly state: ScalerState;
  readonly warm: WarmPools;
  /** Event agents spawned by a peer (or by us) that registered here: the row says who answers for them. */
  readonly adoption: Adoptions;
  /** Adoption lookups the store failed (the agent was refused and retries). */
  adoptionLookupFailures = 0;
  private hookSet: ScalerHooks | undefined;
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

  get hooks(): ScalerHooks | undefined {
    return this.hookSet;
  }

  /** A graceful stop is under way: no spawn of any kind (bound or warm). */
  get stopping(): boolean {
    return this.draining;
  }

  setHooks(hooks: ScalerHooks, registry?: RegistryView): void {
    this.hookSet = hooks;
    if (registry) this.warm.setRegistry(registry);
  }

  /** The lifetime its agents' tokens are minted with, and kept ahead by while they are connected. */
  tokenTtlMs(): number {
    return tokenTtlMs(this.opts);
  }

  globalActiveCount(): number {
    return this.state.globalActiveCount();
  }

  /** Is a spawn for this job in flight (reserved, spawning or not yet registered)? */
  isProvisioning(jobId: string): boolean {
    return this.state.jobToAgent.has(jobId);
  }

  /** The jobs a spawn is in flight for: few (bounded by the caps), so a pass may list them. */
  provisioningJobs(): Iterable<string> {
    return this.state.jobToAgent.keys();
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
        this.state.tally.spawnRefusals++;
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
  provision(match: RoutableLabelSet, res: EffectiveResources, job?: ScaleJob): Promise<ScaleResult> {
    return provisionAgent(this, match, res, job);
  }

  /** A spawn that will never produce a working agent: back off, tell the job, give everything back. */
  failSpawn(m: ManagedEntry, error: ClassifiedSpawnError): Promise<void> {
    return failAgentSpawn(this, m, error);
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
    // Compute and records are gone: the latest moment a trace takes as the end of the release.
    const goneAt = new Date(this.opts.clock.now());
    await this.opts.store.spawns.deleteAgent(m.agentId, goneAt).catch((err: unknown) => {
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
  move(m: ManagedEntry, to: AgentPhase): void {
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
        this.state.tally.redispatch.hook++;
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
    return completeRegistration(this, agentId);
  }

  /** Registration with the shared store's say (registration.ts): adopts event agents first. */
  registerAgent(agentId: string): Promise<RegistrationResult | null> {
    return registerThroughStore(this, agentId);
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
    const mono = monoNow(this.opts.clock);
    // Elapsed time on the monotonic clock when known, so a wall-clock step fails no spawn.
    const age = (m: ManagedEntry) =>
      m.spawnStartedMono !== undefined
        ? mono - m.spawnStartedMono
        : now - (m.spawnStartedAtMs ?? m.createdAtMs);
    for (const m of this.state.agents.values()) {
      // Cluster-lifetime provisions are reaped by the one instance holding the reaper lease.
      if (this.state.backends.get(m.scalerName)?.capabilities.lifetime === 'cluster') continue;
      if (m.phase === 'starting' && age(m) > limit) {
        void this.failSpawn(m, {
          kind: 'spawn-timeout',
          message: `agent ${m.agentId} started but did not register within ${Math.round(limit / 1000)}s`,
          deterministic: false,
        });
      }
    }
    this.sweepRetired();
  }

  /** Tear down unregistered provisions whose job ended meanwhile (run with the periodic sweep). */
  withdrawEnded(): Promise<string[]> {
    return withdrawEndedProvisions(this);
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
    this.hookSet = undefined;
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
    for (const b of this.state.backends.values()) b.release?.();
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
