import type { Server } from 'node:http';
import type { InstanceStatus } from '../cluster/instances-repo.js';
import type { Dispatcher } from '../dispatch/dispatcher.js';
import type { ScalerAuditor } from '../scaler/audit/auditor.js';
import { StoreClaimStore } from '../scaler/claim-store.js';
import type { EventProvisionReaper } from '../scaler/event-reaper.js';
import type { ScaleEventRouter } from '../scaler/events/router.js';
import type { ScalerManager } from '../scaler/manager.js';
import type { OpenedDatabase, Store } from '../store/index.js';
import { systemClock } from '../util/clock.js';
import { defaultDataDir } from '../util/default-data-dir.js';
import { createLogger, type Logger } from '../util/logger.js';
import { swallow } from '../util/swallowed-errors.js';
import type { EventsView } from '../util/typed-events.js';
import { restrictUmask } from './data-dir-lock.js';
import { waitForDrain } from './drain.js';
import type { Metrics } from './metrics.js';
import { listenForApiAndAgents } from './orchestrator-api.js';
import type { OrchestratorEvents } from './orchestrator-events.js';
import { withScalerSettings, type OrchestratorOptions } from './orchestrator-options.js';
import { assembleParts, type OrchestratorParts } from './orchestrator-parts.js';
import { startOrchestratorTimers } from './orchestrator-timers.js';
import type { StoreProbe } from './readiness.js';
import type { RetentionService } from './retention.js';
import { wireScalerSide } from './scaler-hooks.js';
import { applyBackoffReset } from './backoff-routes.js';
import { reloadScalerConfig } from './scaler-reload.js';
import { takeOverPreviousRun } from './start-recovery.js';
import { startupChecks } from './startup-config.js';
import { stopInOrder } from './stop-sequence.js';
import { openLockedStore } from './store-wiring.js';

export type { OrchestratorOptions } from './orchestrator-options.js';
export type { OrchestratorEvents } from './orchestrator-events.js';
export { loadScalerConfigOrThrow } from './startup-config.js';

/** The composition root: store, scaler, dispatcher, HTTP API and agent WebSocket in one process. */
export class Orchestrator {
  private stopping = false;
  private stopRun: Promise<void> | undefined;
  /** Graceful stop under way: /readyz answers 503 "draining" and no new work is started. */
  private draining = false;
  private ready = false;
  private timers: { cancel(): void } | undefined;
  private reloadChain: Promise<unknown> = Promise.resolve();
  readonly store: Store;
  readonly dispatcher: Dispatcher;
  readonly scaler: ScalerManager | undefined;
  readonly adminToken: string;
  readonly instanceId: string;
  readonly metrics: Metrics;
  /** Delivers event scalers' scale-up / scale-down to their provisioning targets. */
  readonly scaleEvents: ScaleEventRouter | undefined;
  readonly retention: RetentionService | undefined;
  /** Filled once by start, after construction: the metrics it wires read both back through here. */
  private scalerSide: { reaper?: EventProvisionReaper | undefined; auditor?: ScalerAuditor | undefined } = {};

  private constructor(
    readonly opts: OrchestratorOptions,
    readonly log: Logger,
    private readonly database: OpenedDatabase,
    private readonly probe: StoreProbe,
    private readonly parts: OrchestratorParts,
  ) {
    ({ store: this.store, dispatcher: this.dispatcher, scaler: this.scaler } = parts);
    ({ adminToken: this.adminToken, instanceId: this.instanceId, metrics: this.metrics } = parts);
    this.scaleEvents = parts.scaleEvents;
    this.retention = parts.upkeep.retention;
  }

  /** Jobs settled, agents registered, spawns failed, leadership and reloads, as they happen here. */
  get events(): EventsView<OrchestratorEvents> {
    return this.parts.events.view();
  }

  get url(): string {
    return this.parts.net.url;
  }

  get wsUrl(): string {
    return this.parts.net.wsUrl;
  }

  get reaper(): EventProvisionReaper | undefined {
    return this.scalerSide.reaper;
  }

  /** Compares the store with what the backends have; runs on a timer for the drift gauge. */
  get auditor(): ScalerAuditor | undefined {
    return this.scalerSide.auditor;
  }

  /** The HTTP server, once listening. */
  private get server(): Server | undefined {
    return this.parts.net.server;
  }

  static async start(given: OrchestratorOptions = {}): Promise<Orchestrator> {
    const opts = withScalerSettings(given);
    const log = opts.logger ?? createLogger();
    const clock = opts.clock ?? systemClock;
    const dataDir = opts.dataDir ?? defaultDataDir();
    const { config, clusterTiming } = await startupChecks(opts, log);
    restrictUmask();
    const { database, probe } = await openLockedStore(opts, dataDir, log);
    // The scaler is built before the orchestrator object; it asks about gateways only at spawn time.
    const self: { orch?: Orchestrator } = {};
    try {
      let urlForAgents = opts.agentUrl ?? process.env.KICI_ORCHESTRATOR_URL;
      const parts = await assembleParts({
        opts,
        config,
        database,
        dataDir,
        clusterTiming,
        clock,
        log,
        agentUrl: () => urlForAgents!,
        gatewayUrlFor: (name) => self.orch?.parts.net.gatewayUrlFor(self.orch.scaler, name),
      });
      const { scaler, dispatcher, cluster, upkeep, events } = parts;
      const orch = (self.orch = new Orchestrator(opts, log, database, probe, parts));
      orch.scalerSide = wireScalerSide({
        ...parts,
        opts,
        database,
        probe,
        clock,
        log,
        sources: { scaler: () => orch.scaler, reaper: () => orch.reaper, auditor: () => orch.auditor },
      });
      const { recovered, adopted } = await takeOverPreviousRun({ ...parts, clock, log });
      await orch.listen(opts.host ?? '127.0.0.1', opts.port ?? 8080);
      urlForAgents ??= orch.wsUrl;
      await orch.syncGateways();
      orch.timers = startOrchestratorTimers({
        opts,
        scaler,
        dispatcher,
        events: orch.events,
        tokens: parts.store.tokens,
        log,
      });
      if (opts.scalerAuditIntervalMs !== 0) orch.auditor?.start(opts.scalerAuditIntervalMs);
      orch.reaper?.start();
      await cluster.start({
        ...parts,
        url: () => orch.url,
        reloadLocal: () => orch.reload(),
        resetBackoffLocal: (order) => applyBackoffReset(dispatcher, log, order),
        leaderTasks: [upkeep.retention.leaderTask(), ...(orch.reaper ? [orch.reaper.leaderTask()] : [])],
        onLeaderChange: (leader) => events.emit('leader.changed', { leader }),
      });
      probe.start();
      upkeep.start();
      scaler?.warm.start();
      orch.ready = true;
      const { engine } = database;
      const scalers = config?.scalers.length ?? 0;
      const ready = { url: orch.url, engine, instanceId: orch.instanceId, scalers, recovered, adopted };
      log.info(ready, `kici-orchestrator ready on ${orch.url}`);
      void dispatcher.requestPump();
      return orch;
    } catch (err) {
      // Whatever had started stops as at any stop (agents holding a job are left for the next
      // start), which closes the store last; a stop that failed leaves the store to close here.
      const stopped = await self.orch
        ?.stop({ agents: 'leave' })
        .then(() => true, swallow(log, 'start.stop-started'));
      if (!stopped) await database.close().catch(swallow(log, 'start.database-close'));
      throw err;
    }
  }

  /** SIGHUP: take a renewed TLS certificate and key for new connections (no-op without TLS). */
  reloadTls(): Promise<'reloaded' | 'not-configured'> {
    return this.parts.net.reloadTls();
  }

  /** The agent-only listeners on the agent networks' gateways (listening on loopback only). */
  gatewayAddresses(): string[] {
    return this.parts.net.gatewayAddresses();
  }

  private syncGateways(): Promise<void> {
    return this.parts.net.syncGateways(this.opts.host ?? '127.0.0.1', this.scaler);
  }

  private claimStoreCache: StoreClaimStore | undefined;
  /** Any orchestrator redeems any code: claims live in the shared store. */
  private get claims(): StoreClaimStore {
    return (this.claimStoreCache ??= new StoreClaimStore(this.store, this.opts.clock ?? systemClock));
  }

  private listen(host: string, port: number): Promise<void> {
    return listenForApiAndAgents(this.parts.net, host, port, {
      parts: this.parts,
      opts: this.opts,
      database: this.database,
      probe: this.probe,
      log: this.log,
      clock: this.opts.clock ?? systemClock,
      life: {
        isReady: () => this.ready && !this.stopping,
        // A stop drains too: /readyz turns away traffic and the dashboard's event streams end.
        isDraining: () => this.draining || this.stopping,
        isStopping: () => this.stopping,
      },
      reloadScaler: (o) => this.reloadEverywhere(o),
      auditor: () => this.auditor,
      claimStore: this.opts.claimStore ?? this.claims,
      onAgentRegistered: (agentId) => this.parts.events.emit('agent.registered', { agentId }),
    });
  }

  /** The instances sharing this database, for `kici-admin cluster status`. */
  clusterStatus(): Promise<{ self: string; instances: InstanceStatus[] }> {
    return this.parts.cluster.status();
  }

  /** This instance holds the leader lease (always true on the embedded store once started). */
  isLeader(): boolean {
    return this.parts.cluster.isLeader();
  }

  /**
   * `kici-admin scaler reload`: with several instances on one PostgreSQL every live one reloads
   * its own config file, and the answer lists each instance's result; alone (or `single`), just
   * this one. `timeoutMs` bounds the wait for the peers' answers.
   */
  async reloadEverywhere(o: { single?: boolean; timeoutMs?: number } = {}): Promise<{
    result: string;
    problems?: string[];
    plan?: unknown;
    instances?: unknown;
  }> {
    const fanout = this.parts.cluster.reloads;
    if (!fanout || o.single) return this.reload();
    const { local, instances } = await fanout.request(o.timeoutMs);
    return { ...local, instances };
  }

  /** SIGHUP / `kici-admin scaler reload`: serialised; an invalid file changes nothing. */
  reload(): Promise<{ result: string; problems?: string[]; plan?: unknown }> {
    const run = () =>
      reloadScalerConfig({
        ...this.parts,
        opts: this.opts,
        scaleEvents: this.scaleEvents,
        log: this.log,
        afterApplied: () => this.syncGateways(),
      });
    const next = this.reloadChain.then(run, run);
    // Only orders the next reload after this one; the caller gets this one's error from `next`.
    this.reloadChain = next.then(
      () => undefined,
      () => undefined,
    );
    return next;
  }

  /**
   * First half of a graceful stop: no new assignments, spawns or warm agents; running jobs go on and
   * their results are stored. Queued jobs stay queued in the store for the next start. Idempotent.
   */
  beginDrain(): void {
    if (this.draining || this.stopping) return;
    this.draining = true;
    this.scaler?.drain();
    void this.dispatcher.drain();
    this.log.info(
      { activeJobs: this.dispatcher.active.size, queuedJobs: this.dispatcher.queue.size },
      'draining: no new jobs are started; waiting for running jobs to finish',
    );
  }

  /** Drain, then wait until no job is active (true) or `timeoutMs` has passed (false). */
  drain(timeoutMs = Infinity): Promise<boolean> {
    this.beginDrain();
    return waitForDrain(this.dispatcher, timeoutMs, () => this.stopping);
  }

  /**
   * Stop taking work, flush data and close. `teardown` (the default, for the demo and tests) destroys
   * every agent and fails jobs that were running on scaler agents. `leave` (serve's signals) keeps
   * agents that hold a job alive and their jobs open: the next start re-adopts them as after a crash.
   * Queued jobs stay queued for the next start either way.
   */
  stop(opts: { agents?: 'teardown' | 'leave' } = {}): Promise<void> {
    return (this.stopRun ??= this.shutdown(opts.agents ?? 'teardown'));
  }

  private async shutdown(agents: 'teardown' | 'leave'): Promise<void> {
    this.stopping = true;
    this.draining = true;
    const { parts, database, log, timers, auditor, reaper, scaleEvents } = this;
    await stopInOrder({ parts, database, log, timers, auditor, reaper, scaleEvents }, agents);
  }
}
