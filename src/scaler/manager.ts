import type { ScalerConfig } from '../config/index.js';
import type { Logger } from '../util/logger.js';
import { isWarmStock, type ManagedEntry } from './agent-book.js';
import { hasRegistered, transition, type AgentPhase } from './agent-lifecycle.js';
import { Adoptions } from './adoption.js';
import { CapacityFreedSignal } from './capacity-freed.js';
import { decide, type DecideState, type Decision, type PoolView } from './core/decide.js';
import type { EffectiveResources } from './core/resources.js';
import type { RoutableLabelSet } from './core/routing.js';
import type { ClassifiedSpawnError } from './core/spawn-errors.js';
import type { ReloadHost, RecoveryHost, SpawnHost, TeardownReason, WarmPoolHost } from './lifecycle-port.js';
import type { ScalerHooks, ScalerManagerOptions } from './manager-options.js';
import { ScalerManagerViews } from './manager-views.js';
import { recoverAgents } from './recovery.js';
import { completeRegistration, registerThroughStore, type RegistrationResult } from './registration.js';
import { ReturnWatch } from './registration-return.js';
import { applyReload, type BackendFactory, type ReloadOutcome } from './reload.js';
import { decisionState, poolViewsFor, requestScaleFor, routeQuery } from './scale-request.js';
import { stopAgents } from './shutdown.js';
import { failAgentSpawn, provisionAgent } from './spawn.js';
import { failStaleSpawns } from './stale-spawns.js';
import { SwallowedErrors } from './swallowed-errors.js';
import { teardownAgent } from './teardown.js';
import type { DestroyReason, LaterWork, ScaleJob, ScaleResult } from './types.js';
import { WarmPools, type RegistryView } from './warm-pool.js';
import { withdrawEndedProvisions, withdrawProvisionsFor } from './withdrawal.js';
import { JobReports } from './job-reports.js';

export { ScalerAdoptionLookupError } from './adoption.js';
export type { ScalerHooks, ScalerManagerOptions } from './manager-options.js';
export { RegistrationRefused, type RegistrationResult } from './registration.js';
export { DEFAULT_AGENT_TOKEN_TTL_MS, DEFAULT_SPAWN_TIMEOUT_MS } from './spawn.js';

/**
 * The thin async shell around the pure decision core: it asks the core where a job goes and whether
 * caps allow it, persists the spawn record, and runs the backend call under the scaler's spawn
 * semaphore and deadline. Every outcome flows back into the core (reservation released, backoff armed).
 * The read-only queries are inherited (manager-views.ts); each piece of work lives in a module beside
 * this one that takes the manager as a narrow host, while the fields, the phase moves and the one
 * place an agent leaves the maps (`forget`) stay here.
 */
export class ScalerManager
  extends ScalerManagerViews
  implements RecoveryHost, ReloadHost, WarmPoolHost, SpawnHost
{
  readonly warm: WarmPools;
  /** Event agents spawned by a peer (or by us) that registered here: the row says who answers for them. */
  readonly adoption: Adoptions;
  private hookSet: ScalerHooks | undefined;
  private readonly freed: CapacityFreedSignal;
  /** Set by a graceful stop: no spawn of any kind (bound or warm) from then on. */
  private draining = false;
  private readonly swallowed: SwallowedErrors;
  readonly log: Logger;
  /** Teardowns under way: an agent's capacity is given back when one starts, its compute and records later. */
  private readonly tearing = new Set<Promise<void>>();
  /** Reports about jobs whose run is still being stored wait here (job-reports.ts). */
  private readonly reports = new JobReports();
  readonly returns: ReturnWatch;

  constructor(opts: ScalerManagerOptions) {
    super(opts);
    this.log = opts.logger.child({ component: 'scaler' });
    this.swallowed = new SwallowedErrors(this.log, () => this.hooks);
    this.freed = new CapacityFreedSignal(opts.clock, this.log, this.state.tally, () => this.hooks);
    this.warm = new WarmPools(this, opts.clock, this.log);
    this.adoption = new Adoptions(this);
    this.returns = new ReturnWatch(this);
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

  /** The facts the decision reads, as they are now. `pools`: ledger usage read just before. */
  decisionState(job?: ScaleJob, pools?: ReadonlyMap<string, PoolView>): DecideState {
    return decisionState(this, job, pools);
  }

  /** The one decision for this job over the state as it is now (synchronous; no ledger read). */
  decideNow(job: ScaleJob, pools?: ReadonlyMap<string, PoolView>): Decision {
    return decide({ id: job.id, ...routeQuery(job) }, this.decisionState(job, pools));
  }

  /** Ledger usage of the machine pool this job would draw from, when there is one. */
  poolViewsFor(job: ScaleJob): Promise<ReadonlyMap<string, PoolView> | undefined> {
    return poolViewsFor(this, job);
  }

  /** What `requestScale` would decide for this job now, without acting (scaler explain). */
  async decideFor(job: ScaleJob): Promise<Decision> {
    return this.decideNow(job, await this.poolViewsFor(job));
  }

  /** Decide for this job and act on it (scale-request.ts): a spawn, or why there is none. */
  requestScale(job: ScaleJob): Promise<ScaleResult> {
    return requestScaleFor(this, job);
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
  teardown(m: ManagedEntry, reason: TeardownReason): Promise<void> {
    const p = teardownAgent(this, m, reason);
    this.tearing.add(p);
    const done = () => void this.tearing.delete(p);
    p.then(done, done);
    return p;
  }

  /** How many agents are being torn down: gone from the books, their compute or records not yet. */
  get teardownsInFlight(): number {
    return this.tearing.size;
  }

  /** The teardowns under way now (a stop waits for them within its grace). */
  inFlightTeardowns(): Promise<void>[] {
    return [...this.tearing];
  }

  /** Forget an agent in memory and give its capacity back (synchronously, so caps see it at once). */
  forget(m: ManagedEntry): void {
    if (m.phase !== 'destroying') this.move(m, 'destroying');
    this.returns.drop(m.agentId);
    const s = this.state;
    s.untrack(m);
    if (m.boundJobId) s.releaseJob(m.boundJobId, m.agentId);
    if (s.caps.release(m.agentId) && m.machinePool && this.opts.ledger) {
      const pool = m.machinePool;
      this.opts.ledger
        .release(pool, m.agentId)
        .catch((e: unknown) => this.noteSwallowed('scaler.ledger-release', e, { agentId: m.agentId, pool }));
    }
  }

  /** An error we carry on from: logged with its context, counted per site, reported to the hook. */
  noteSwallowed(site: string, err: unknown, context: Record<string, unknown> = {}): void {
    this.swallowed.note(site, err, context);
  }

  /** How many errors were carried on from, per site, since start. */
  swallowedErrors(): Record<string, number> {
    return this.swallowed.counts();
  }

  /** Every phase change goes through the table; a refused one is logged and counted, then thrown. */
  move(m: ManagedEntry, to: AgentPhase): void {
    transition(m, to, (err) => {
      this.state.tally.illegalTransition();
      this.log.error(
        { agentId: m.agentId, from: err.from, to: err.to },
        'illegal agent lifecycle transition',
      );
    });
  }

  notifyCapacityFreed(): void {
    this.freed.notify();
  }

  /**
   * An agent presented a scaler id. Known → its gate and bound job. Unknown `scaler-` id → refused:
   * registering it as static would drop its gate.
   */
  onAgentRegistered(agentId: string): RegistrationResult | null {
    return completeRegistration(this, agentId);
  }

  /**
   * Registration with the shared store's say (registration.ts): adopts event agents first. `later`
   * takes the spawn row's registered stamp, for the caller to issue once it delays nothing.
   */
  registerAgent(agentId: string, later?: LaterWork): Promise<RegistrationResult | null> {
    return registerThroughStore(this, agentId, later);
  }

  /**
   * The server could not finish the agent's registration after it was counted here, and asked the
   * agent to dial again: back within `graceMs` it registers with its job; not back, it is torn down as
   * a disconnect would (registration-return.ts).
   */
  onRegistrationFailed(agentId: string, boundJobId: string | undefined, graceMs: number): void {
    this.returns.expect(agentId, boundJobId, graceMs);
  }

  /** Read by `kici_orch_scaler_adoption_lookup_failures_total` on each scrape. */
  onAdoptionLookupFailed(): void {
    this.state.tally.adoptionLookupFailed();
  }

  /** The dispatcher handed a job to one of our agents: a warm agent is no longer idle stock. */
  onJobAssigned(agentId: string): void {
    const m = this.state.agents.get(agentId);
    if (m?.phase !== 'registered') return;
    const stock = isWarmStock(m);
    this.move(m, 'busy');
    if (stock) this.warm.replenishSoon();
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
      this.state.dropScaler(name);
      void backend?.shutdownAll();
      this.log.info({ scaler: name }, 'scaler retired');
    }
  }

  /** Backstop for agents that were started but never registered (wrong URL, hung start-up). */
  sweepStale(): void {
    failStaleSpawns(this);
    this.sweepRetired();
  }

  /** Tear down unregistered provisions whose job ended meanwhile (run with the periodic sweep). */
  withdrawEnded(): Promise<string[]> {
    return withdrawEndedProvisions(this);
  }

  /** Reports about this job (its spawn's notes and failure) wait until `jobStored`. */
  holdReports(jobId: string): void {
    this.reports.hold(jobId);
  }

  /** The held job's run was stored (its reports go out now) or was not (they are dropped). */
  jobStored(jobId: string, stored: boolean): void {
    this.reports.release(jobId, stored);
  }

  reportFor(jobId: string, report: () => void): void {
    this.reports.send(jobId, report);
  }

  /** Tear down unregistered provisions bound to these jobs, which were never stored. */
  withdrawFor(jobIds: readonly string[]): Promise<void> {
    return withdrawProvisionsFor(this, jobIds);
  }

  /** Graceful stop: no more spawns, warm pools stop refilling; agents already there keep running. */
  drain(): void {
    this.draining = true;
    this.warm.stop();
  }

  /**
   * Stop everything this manager started (shutdown.ts). Never hangs longer than the grace. Agents in
   * `keep` (they hold a running job) are left alive with their spawn records and tokens, so the next
   * start adopts them exactly as after a crash. `drain` marks the end of a graceful stop, `shutdown` a
   * plain one.
   */
  async shutdownAll(
    graceMs = 15_000,
    keep?: ReadonlySet<string>,
    reason: Extract<DestroyReason, 'shutdown' | 'drain'> = 'shutdown',
  ): Promise<void> {
    this.drain();
    this.freed.cancel();
    this.returns.stop();
    this.hookSet = undefined;
    await stopAgents(this, graceMs, keep, reason);
  }
}
