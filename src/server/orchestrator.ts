import { ScalerAuditor } from '../scaler/audit/auditor.js';
import { defaultDataDir } from '../util/default-data-dir.js';
import type { Server } from 'node:http';
import { createListener } from './tls.js';
import { TypedEvents, type EventsView } from '../util/typed-events.js';
import { emittingObserver, type OrchestratorEvents } from './orchestrator-events.js';
import type { AddressInfo } from 'node:net';
import { getRequestListener } from '@hono/node-server';
import type { WebSocketServer } from 'ws';
import { loadScalerConfigForPeople, type ScalerConfig } from '../config/index.js';
import { Dispatcher } from '../dispatch/dispatcher.js';
import { CloseCodes } from '../protocol/messages.js';
import { createScalerBackend } from '../scaler/backends/registry.js';
import { sweepOrphans } from './orphan-sweep.js';
import { startupDiskGuard } from './startup-disk-guard.js';
import { loadCheckedScalerConfig } from './startup-config.js';
import type { ScalerManager } from '../scaler/manager.js';
import { throttledConnectionLog } from '../store/pg-pool.js';
import { createStore, openDatabase, type OpenedDatabase, type Store } from '../store/index.js';
import { every, systemClock, type TimerHandle } from '../util/clock.js';
import { errorMessage, UserError } from '../util/errors.js';
import { createLogger, type Logger } from '../util/logger.js';
import { countSwallowed, swallow } from '../util/swallowed-errors.js';
import { answerClientErrors, createAgentEndpoint, type AgentEndpoint } from './agent-endpoint.js';
import { GatewayListeners, isLoopbackHost } from './gateway-listener.js';
import { applyBackoffReset } from './backoff-routes.js';
import { handleAgentSocket } from './agent-socket.js';
import { waitForDrain } from './drain.js';
import { instancePart } from './instance-part.js';
import { createHttpApi } from './http-api.js';
import { holdUntilClosed, lockDataDir, restrictUmask } from './data-dir-lock.js';
import { loadInstanceId } from './instance.js';
import { defaultAdminTokenFile, ensureBootstrapToken } from '../access/bootstrap-token.js';
import { Metrics, STATIC_RUNNER } from './metrics.js';
import { registerScalerMetrics } from './scaler-metrics.js';
import { StoreProbe } from './readiness.js';
import { StoreClaimStore } from '../scaler/claim-store.js';
import type { EventProvisionReaper } from '../scaler/event-reaper.js';
import { ScaleEventRouter } from '../scaler/events/router.js';
import { wireEventScaling } from './event-wiring.js';
import { resolveInstanceId } from '../cluster/instance-id.js';
import { InstancesRepo, type InstanceStatus } from '../cluster/instances-repo.js';
import { ClusterNode } from '../cluster/cluster-node.js';
import { claimForScaling } from '../cluster/queue-sync.js';
import { applyCancelRequests, cancelAnywhere, type RemoteCancelDeps } from '../cluster/remote-cancel.js';
import { packageVersion } from '../version.js';
import {
  clusterHeartbeatMs,
  clusterLockTimeoutMs,
  type OrchestratorOptions,
} from './orchestrator-options.js';
import { backendContext, buildScaler } from './scaler-wiring.js';
import { jobTargetProblems } from '../scaler/events/job-targets.js';
import { closeSilentAgents } from './heartbeat-check.js';
import { RetentionService } from './retention.js';
import { DiskSpaceWatcher } from './disk-watch.js';
import { WalKeeper } from '../store/wal-keeper.js';
import { retentionFromSettings } from '../store/retention/policy.js';
import { agentHeartbeatMs, instanceSettings, withScalerSettings } from './orchestrator-options.js';
import { LiveScalerSettings } from '../cluster/live-settings.js';
import { ClusterSettingsRepo } from '../store/cluster-settings-repo.js';
import { vmNetworkCheck } from './vm-network-check.js';
import { startPendingSweep } from './pending-sweep.js';

export type { OrchestratorOptions } from './orchestrator-options.js';
export type { OrchestratorEvents } from './orchestrator-events.js';

/** Load and check the scaler config; every problem is listed, and nothing is thrown for bad input. */
export async function loadScalerConfigOrThrow(path: string, dir?: string): Promise<ScalerConfig> {
  const res = await loadScalerConfigForPeople(path, dir);
  const problems = res.ok ? await jobTargetProblems(res.config, path) : res.problems;
  if (!res.ok || problems.length)
    throw new UserError(`invalid scaler configuration:\n  ${problems.join('\n  ')}`, problems);
  return res.config;
}

/** The composition root: store, scaler, dispatcher, HTTP API and agent WebSocket in one process. */
export class Orchestrator {
  url = '';
  wsUrl = '';
  private stopping = false;
  private stopRun: Promise<void> | undefined;
  /** Graceful stop under way: /readyz answers 503 "draining" and no new work is started. */
  private draining = false;
  private ready = false;
  private sweepTimer: TimerHandle | undefined;
  private heartbeatTimer: TimerHandle | undefined;
  private reloadChain: Promise<unknown> = Promise.resolve();
  private probe: StoreProbe | undefined;
  /** Delivers event scalers' scale-up / scale-down to their provisioning targets. */
  scaleEvents: ScaleEventRouter | undefined;
  reaper: EventProvisionReaper | undefined;
  private cluster: ClusterNode | undefined;
  retention: RetentionService | undefined;
  /** Compares the store with what the backends have; runs on a timer for the drift gauge. */
  auditor: ScalerAuditor | undefined;
  private disk: DiskSpaceWatcher | undefined;
  private walKeeper: WalKeeper | undefined;
  private liveSettings: LiveScalerSettings | undefined;
  private emitter = new TypedEvents<OrchestratorEvents>();

  private constructor(
    readonly opts: OrchestratorOptions,
    readonly store: Store,
    private readonly database: OpenedDatabase,
    readonly dispatcher: Dispatcher,
    readonly scaler: ScalerManager | undefined,
    readonly adminToken: string,
    readonly instanceId: string,
    readonly metrics: Metrics,
    readonly log: Logger,
    private server?: Server,
    private wss?: WebSocketServer,
  ) {}

  /** Jobs settled, agents registered, spawns failed, leadership and reloads, as they happen here. */
  get events(): EventsView<OrchestratorEvents> {
    return this.emitter.view();
  }

  static async start(given: OrchestratorOptions = {}): Promise<Orchestrator> {
    const opts = withScalerSettings(given);
    const log = opts.logger ?? createLogger();
    const clock = opts.clock ?? systemClock;
    const dataDir = opts.dataDir ?? defaultDataDir();
    const config = opts.scalerConfigPath ? await loadCheckedScalerConfig(opts, log) : undefined;
    // Checked before anything starts: a bad value is a UserError, not a half-started server.
    const clusterTiming = { heartbeatMs: clusterHeartbeatMs(opts), lockTimeoutMs: clusterLockTimeoutMs() };
    if (config)
      await startupDiskGuard(config, {
        configPath: opts.scalerConfigPath!,
        logger: log,
        ...opts.startupDiskGuard,
      });
    restrictUmask();
    const lock = await lockDataDir(dataDir).catch(async (err: unknown) => {
      await opts.database?.close();
      throw err;
    });
    const opened =
      opts.database ??
      (await openDatabase({
        url: opts.databaseUrl,
        dataDir,
        onConnectionError: throttledConnectionLog((f, m) => log.warn(f, m)),
      }).catch((err: unknown) => {
        lock.release();
        throw err;
      }));
    const probeDirs = opened.pgDir ? [dataDir, opened.pgDir] : [dataDir];
    const probe = new StoreProbe(opened.db, probeDirs, log);
    const database = holdUntilClosed(opened, lock, () => probe.stop());
    try {
      const store = createStore(database.db);
      const instanceId = await resolveInstanceId(opts.instanceId, process.env.KICI_INSTANCE_ID, () =>
        loadInstanceId(dataDir),
      );
      const { token: adminToken } = await ensureBootstrapToken({
        file: opts.adminTokenFile ?? defaultAdminTokenFile(),
        dataDir,
        tokens: store.accessTokens,
        instanceId,
        now: new Date(clock.now()),
        logger: log,
      });
      // Peers on the same PostgreSQL keep their own agents' rows (only ours are cleared).
      if (opened.engine === 'postgres') store.agents.ownedBy(instanceId);
      await store.agents.markAllGone(new Date(clock.now()));
      let urlForAgents = opts.agentUrl ?? process.env.KICI_ORCHESTRATOR_URL;
      // The scaler is built before the orchestrator object; it asks about gateways only at spawn time.
      const self: { orch?: Orchestrator } = {};
      const scaleEvents = new ScaleEventRouter({
        db: database.db,
        logger: log,
        configPath: opts.scalerConfigPath ?? '',
        ...(opts.hostEnv ? { hostEnv: opts.hostEnv } : {}),
        ...(opts.webhookRetry ? { webhookRetry: opts.webhookRetry } : {}),
        now: () => clock.now(),
      });
      // Cluster-wide values over this instance's own settings, read before anything uses them.
      const live = new LiveScalerSettings(instanceSettings(opts), new ClusterSettingsRepo(database.db), log);
      await live.refresh();
      const scaler = config
        ? await buildScaler(config, opts, {
            store,
            clock,
            log,
            instanceId,
            agentUrl: () => urlForAgents!,
            gatewayUrlFor: (name) => self.orch?.gatewayUrlFor(name),
            scaleEvents,
            live,
          })
        : undefined;
      // Listener errors are logged, never thrown into the code that emitted.
      const events = new TypedEvents<OrchestratorEvents>((err) =>
        log.warn({ err: errorMessage(err) }, 'an orchestrator event listener failed'),
      );
      const metrics = new Metrics((agentId) => {
        const m = scaler?.state.agents.get(agentId);
        return m ? { scaler: m.scalerName, backend: m.type } : STATIC_RUNNER;
      });
      // Filled once the cluster node runs (after listen); the dispatcher asks it about peers.
      const clusterRef: { node?: ClusterNode | undefined } = {};
      const dispatcher = new Dispatcher({
        store,
        clock,
        logger: log,
        scaler,
        observer: emittingObserver(metrics, events),
        ...(opened.engine === 'postgres' && {
          instanceId,
          scaleClaim: (jobId: string) => claimForScaling(database.db, jobId, instanceId),
          peersCould: (runsOn: readonly string[]) => clusterRef.node?.peersCouldScale(runsOn) ?? false,
          // Unknown until the cluster node runs: counted alive, so nothing is failed too early.
          peerAlive: async (id: string) =>
            clusterRef.node ? (await clusterRef.node.repo.alivePeers(instanceId)).includes(id) : true,
        }),
        ...(opts.reconnectGraceMs !== undefined ? { reconnectGraceMs: opts.reconnectGraceMs } : {}),
      });
      const orch = new Orchestrator(
        opts,
        store,
        database,
        dispatcher,
        scaler,
        adminToken,
        instanceId,
        metrics,
        log,
      );
      self.orch = orch;
      orch.emitter = events;
      orch.probe = probe;
      orch.liveSettings = live;
      if (opened.engine === 'pglite') {
        orch.disk = new DiskSpaceWatcher(dataDir, log, opts.dataMinFreeBytes);
        orch.disk.onChange = (low) => void (low || dispatcher.requestPump());
        // Near the floor, no new job starts and output waits in memory; results are still stored.
        const disk = orch.disk;
        dispatcher.holdNewWork = () => disk.low;
        dispatcher.logs.holdWrites = () => disk.low;
        orch.walKeeper = new WalKeeper(database.db, clock, log);
      }
      orch.retention = new RetentionService(
        database.db,
        database.engine,
        opts.retention ?? retentionFromSettings({}),
        () => clock.now(),
        metrics,
        log,
      );
      orch.scaleEvents = scaleEvents;
      if (scaler) orch.auditor = new ScalerAuditor(scaler, store, clock, log);
      registerScalerMetrics(metrics.registry, {
        scaler: () => orch.scaler,
        reaper: () => orch.reaper,
        auditor: () => orch.auditor,
      });
      orch.reaper = wireEventScaling({
        router: scaleEvents,
        dispatcher,
        metrics,
        scaler,
        database,
        instanceId,
        clock,
        claimRetentionMs: opts.claimRetentionMs,
        logger: log,
        spawnTimeoutMs: opts.spawnTimeoutMs,
        reapIntervalMs: opts.reapIntervalMs,
        reapWindows: opts.reapWindows,
        live: live.reapTuning(),
      });
      probe.onRecovered = () => void dispatcher.resyncQueued().catch(swallow(log, 'store.resync-queued'));
      scaler?.setHooks(
        {
          onCapacityFreed: () => void dispatcher.requestPump(),
          onJobEvent: (jobId, type, detail) =>
            dispatcher.logs.push([
              {
                jobId,
                stepIdx: null,
                stream: 'system',
                line: `${type}: ${detail}`,
                ts: new Date(clock.now()),
              },
            ]),
          onSpawnFailed: (jobId, err) => {
            // The entry is still tracked while its failure is reported: it names the backend type.
            const backend = scaler.entries().find((e) => e.boundJobId === jobId)?.type ?? 'unknown';
            const entry = scaler.entries().find((e) => e.boundJobId === jobId);
            metrics.spawnFailures.inc({
              scaler: entry?.scalerName ?? '',
              backend,
              bound: 'true',
              kind: err.kind,
            });
            const message = `${err.kind}: ${err.message}`;
            const q = dispatcher.queue.get(jobId);
            if (q) q.waiting = message;
            store.jobs
              .setProvisioningError(jobId, message)
              .catch(swallow(log, 'job.provisioning-error', { jobId }));
            events.emit('spawn.failed', { jobId, kind: err.kind, message: err.message });
          },
          // The manager has logged it already; this feeds kici_orch_swallowed_errors_total{site}.
          onSwallowedError: (site) => countSwallowed(site),
          onAgentRegistered: (name, backend, ms) => metrics.spawnRegistered({ scaler: name, backend }, ms),
        },
        dispatcher.registryView(),
      );
      const recovered = await dispatcher.recover();
      const adopted = scaler ? await scaler.recover() : undefined;
      if (scaler) await sweepOrphans(scaler, dispatcher, log);
      await orch.listen(opts.host ?? '127.0.0.1', opts.port ?? 8080);
      urlForAgents ??= orch.wsUrl;
      await orch.syncGateways();
      orch.startTimers(opts);
      if (opts.scalerAuditIntervalMs !== 0) orch.auditor?.start(opts.scalerAuditIntervalMs);
      orch.reaper?.start();
      await orch.startCluster(database, clusterTiming);
      // Changes made through a peer arrive with the heartbeat's rhythm.
      await live.start(clock, clusterTiming.heartbeatMs);
      clusterRef.node = orch.cluster;
      probe.start();
      orch.disk?.start();
      orch.walKeeper?.start();
      scaler?.warm.start();
      orch.ready = true;
      log.info(
        {
          url: orch.url,
          engine: database.engine,
          instanceId,
          scalers: config?.scalers.length ?? 0,
          recovered,
          adopted,
        },
        `kici-orchestrator ready on ${orch.url}`,
      );
      void dispatcher.requestPump();
      return orch;
    } catch (err) {
      await database.close().catch(swallow(log, 'start.database-close'));
      throw err;
    }
  }

  private tlsReload: (() => Promise<void>) | undefined;
  /** SIGHUP: take a renewed TLS certificate and key for new connections (no-op without TLS). */
  async reloadTls(): Promise<'reloaded' | 'not-configured'> {
    if (!this.tlsReload) return 'not-configured';
    await this.tlsReload();
    await this.gateways?.reloadTls();
    return 'reloaded';
  }

  private endpoint: AgentEndpoint | undefined;
  private gateways: GatewayListeners | undefined;
  /** The agent-only listeners on the agent networks' gateways (listening on loopback only). */
  gatewayAddresses(): string[] {
    return this.gateways?.addresses() ?? [];
  }

  /** Where the agents of scaler `name` dial, when they sit behind a gateway listener of ours. */
  private gatewayUrlFor(name: string): string | undefined {
    const b = this.scaler?.backendList().find((x) => x.name === name);
    return b?.agentGateway && b.agentGatewayScope !== 'containers'
      ? this.gateways?.urlFor(b.agentGateway)
      : undefined;
  }

  /**
   * With the API on loopback, open an agent-only listener on each local agent network's gateway
   * (and close those no scaler uses any more). Listening on every address already covers them.
   */
  private async syncGateways(): Promise<void> {
    const host = this.opts.host ?? '127.0.0.1';
    if (!this.scaler || !this.server || !this.endpoint || !isLoopbackHost(host)) return;
    const wanted = new Set<string>();
    for (const b of this.scaler.backendList()) if (b.agentGateway) wanted.add(b.agentGateway);
    if (!this.gateways && wanted.size === 0) return;
    const endpoint = this.endpoint;
    this.gateways ??= new GatewayListeners({
      port: (this.server.address() as AddressInfo).port,
      tls: this.opts.tls,
      attach: (server) => endpoint.attach(server),
      prepare: (server) => answerClientErrors(server, this.log),
      clock: this.opts.clock ?? systemClock,
      log: this.log,
    });
    await this.gateways.sync(wanted);
  }

  private claimStoreCache: StoreClaimStore | undefined;
  /** Any orchestrator redeems any code: claims live in the shared store. */
  private get claims(): StoreClaimStore {
    return (this.claimStoreCache ??= new StoreClaimStore(this.store, this.opts.clock ?? systemClock));
  }

  private async listen(host: string, port: number): Promise<void> {
    const app = createHttpApi({
      store: this.store,
      dispatcher: this.dispatcher,
      clock: this.opts.clock ?? systemClock,
      metricsPublic: this.opts.metricsPublic ?? false,
      metrics: this.metrics,
      isReady: () => this.ready && !this.stopping,
      // A stop drains too: /readyz turns away traffic and the dashboard's event streams end.
      isDraining: () => this.draining || this.stopping,
      logger: this.log,
      ...(this.probe ? { readiness: this.probe } : {}),
      reloadScaler: (o) => this.reloadEverywhere(o),
      clusterStatus: () => this.clusterStatus(),
      instanceId: this.instanceId,
      peerParts: async () => (await this.cluster?.peerParts()) ?? [],
      clusterSettings: this.liveSettings,
      vmNetworkCheck: () => vmNetworkCheck(this.scaler?.config),
      ...(this.database.engine === 'postgres' && {
        cancelJob: (id: string) => cancelAnywhere(this.remoteCancelDeps(), id),
      }),
      scalerConfigPath: this.opts.scalerConfigPath,
      ...(this.retention ? { retention: this.retention } : {}),
      snapshot: this.database.snapshot,
      diskSpace: this.disk,
      auditor: () => this.auditor,
      backoffResets: () => this.cluster?.backoffResets,
    });
    const listener = getRequestListener(app.fetch);
    // The listener answers its own errors (500), so nothing is left to await here.
    const { server, reload } = await createListener((req, res) => void listener(req, res), this.opts.tls);
    this.tlsReload = reload;
    answerClientErrors(server, this.log);
    const endpoint = createAgentEndpoint(this.log, (ws, remote, onRegistered, socket) =>
      handleAgentSocket(
        ws,
        {
          store: this.store,
          dispatcher: this.dispatcher,
          clock: this.opts.clock ?? systemClock,
          logger: this.log,
          heartbeatIntervalMs: agentHeartbeatMs(this.opts),
          isStopping: () => this.stopping,
          leaveGraceMs: this.opts.agentLeaveGraceMs,
          onRegistered: (agentId: string) => {
            onRegistered();
            this.emitter.emit('agent.registered', { agentId });
          },
          claimStore: this.opts.claimStore ?? this.claims,
        },
        remote,
        socket,
      ),
    );
    endpoint.attach(server);
    this.endpoint = endpoint;
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, host, () => resolve());
    });
    // After start-up an error on the listening socket (EMFILE on accept, say) is logged, never thrown.
    server.on('error', (err) => this.log.error({ err: errorMessage(err) }, 'http server error'));
    const addr = server.address() as AddressInfo;
    const shownHost = host === '0.0.0.0' || host === '::' ? '127.0.0.1' : host;
    const secure = this.opts.tls ? 's' : '';
    this.url = `http${secure}://${shownHost}:${addr.port}`;
    this.wsUrl = `ws${secure}://${shownHost}:${addr.port}/ws`;
    this.server = server;
    this.wss = endpoint.wss;
  }

  /** Heartbeat this instance into kici_instances (clustering). */
  private async startCluster(
    database: OpenedDatabase,
    timing: { heartbeatMs: number; lockTimeoutMs: number },
  ): Promise<void> {
    this.cluster = new ClusterNode({
      db: database.db,
      engine: database.engine,
      databaseUrl: this.opts.databaseUrl,
      instanceId: this.instanceId,
      version: packageVersion(),
      ...timing,
      facts: {
        address: () => process.env.KICI_ADVERTISE_URL || this.url,
        agentsConnected: () => this.dispatcher.registry.list().length,
        jobsRunning: () => this.dispatcher.active.size,
        scaleLabelSets: () =>
          this.scaler?.scalerEntries().flatMap((e) => e.entry.labelSets.map((ls) => [...ls.labels])) ?? [],
        // Only peers read it: one instance on PGlite answers from its live state.
        ...(database.engine === 'postgres' && {
          part: () =>
            instancePart(this.dispatcher, this.opts.clock ?? systemClock, this.opts.scalerConfigPath),
        }),
      },
      resyncQueue: () => this.dispatcher.resyncQueued(),
      applyCancels: () => applyCancelRequests(this.remoteCancelDeps()),
      reconnectGraceMs: this.dispatcher.reconnectGraceMs,
      reloadLocal: () => this.reload(),
      resetBackoffLocal: (order) => applyBackoffReset(this.dispatcher, this.log, order),
      leaderTasks: [
        ...(this.retention ? [this.retention.leaderTask()] : []),
        ...(this.reaper ? [this.reaper.leaderTask()] : []),
      ],
      log: this.log,
      clock: this.opts.clock,
    });
    this.cluster.lease.onChange((leader) => this.emitter.emit('leader.changed', { leader }));
    await this.cluster.start();
  }

  /** What a cancel needs to reach a job held by another instance (clustering). */
  private remoteCancelDeps(): RemoteCancelDeps {
    return {
      store: this.store,
      dispatcher: this.dispatcher,
      clock: this.opts.clock ?? systemClock,
      instanceId: this.instanceId,
      aliveInstances: async () =>
        (await this.clusterStatus()).instances.filter((i) => i.state === 'alive').map((i) => i.id),
      log: this.log,
    };
  }

  /** The instances sharing this database, for `kici-admin cluster status`. */
  async clusterStatus(): Promise<{ self: string; instances: InstanceStatus[] }> {
    return this.cluster
      ? this.cluster.status()
      : { self: this.instanceId, instances: await new InstancesRepo(this.database.db).list() };
  }

  /** This instance holds the leader lease (always true on the embedded store once started). */
  isLeader(): boolean {
    return this.cluster?.lease.isLeader() ?? false;
  }

  private startTimers(opts: OrchestratorOptions): void {
    // Periodic re-drive: the backstop that keeps a job from waiting past one interval while capacity exists.
    const clock = opts.clock ?? systemClock;
    this.sweepTimer = startPendingSweep(opts, () => {
      this.scaler?.sweepStale();
      void this.scaler?.withdrawEnded();
      if (this.scaler) this.scaler.state.tally.redispatch.sweep++;
      void this.dispatcher.requestPump();
    });
    // A job that ends while its provision is still starting frees that provision at once; the
    // sweep above is only the backstop for ends this instance does not hear (a peer's cancel).
    this.emitter.on('job.settled', ({ jobId }) => {
      const starting = this.scaler?.entries().some((m) => m.boundJobId === jobId && m.phase === 'starting');
      if (starting)
        this.scaler
          ?.withdrawEnded()
          .catch((err: unknown) =>
            this.log.warn({ err: errorMessage(err) }, 'could not withdraw a provision'),
          );
    });
    const hb = agentHeartbeatMs(opts);
    this.heartbeatTimer = every(clock, hb, () =>
      closeSilentAgents(this.dispatcher.registry.list(), clock, hb),
    );
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
    const fanout = this.cluster?.reloads;
    if (!fanout || o.single) return this.reload();
    const { local, instances } = await fanout.request(o.timeoutMs);
    return { ...local, instances };
  }

  /** SIGHUP / `kici-admin scaler reload`: serialised; an invalid file changes nothing. */
  reload(): Promise<{ result: string; problems?: string[]; plan?: unknown }> {
    const run = async () => {
      const path = this.opts.scalerConfigPath;
      if (!path || !this.scaler) return { result: 'not-configured' };
      // Counted once per outcome (success or failed) so that their sum is the number of attempts.
      const res = await loadScalerConfigForPeople(path, this.opts.scalerConfigDir).catch((err: unknown) => ({
        ok: false as const,
        problems: [errorMessage(err)],
      }));
      const outcome = res.ok
        ? await this.scaler.reload(res.config, (entry) =>
            createScalerBackend(
              entry,
              backendContext(this.opts, this.log, this.store, this.scaleEvents, res.config),
            ),
          )
        : ({ result: 'rejected', problems: res.problems } as const);
      if (outcome.result === 'rejected') {
        this.metrics.configReloads.inc({ result: 'failed' });
        this.log.error(
          { problems: outcome.problems },
          'scaler configuration reload rejected; keeping the current one',
        );
      } else {
        this.metrics.configReloads.inc({ result: 'success' });
        await this.syncGateways().catch(swallow(this.log, 'reload.gateway-listeners'));
      }
      this.emitter.emit('reload.applied', {
        result: outcome.result,
        problems: 'problems' in outcome ? outcome.problems : undefined,
      });
      return outcome;
    };
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
    this.sweepTimer?.cancel();
    this.heartbeatTimer?.cancel();
    this.auditor?.stop();
    this.disk?.stop();
    await this.walKeeper?.stop();
    this.liveSettings?.stop();
    await this.reaper?.stop();
    await this.dispatcher.stop();
    // Jobs that were handed out but never started go back to the queue; started ones cannot be resumed.
    const kept = new Set<string>();
    for (const a of [...this.dispatcher.active.values()]) {
      const agent = this.dispatcher.registry.get(a.agentId);
      const goesAway = !agent || agent.kind === 'scaler';
      if (!goesAway) continue;
      if (agents === 'leave') {
        // Not even a dispatched job is requeued: its agent may be starting it right now.
        kept.add(a.agentId);
        continue;
      }
      if (a.state === 'dispatched')
        await this.store.jobs
          .requeue(a.job.id, a.agentId)
          .catch(swallow(this.log, 'shutdown.requeue', { jobId: a.job.id }));
      else
        await this.dispatcher.active.settleActive(
          a.job.id,
          'failed',
          null,
          'orchestrator shut down while the job was running',
          false,
        );
    }
    await this.scaler?.shutdownAll(
      undefined,
      kept.size > 0 ? kept : undefined,
      agents === 'leave' ? 'drain' : 'shutdown',
    );
    for (const a of this.dispatcher.registry.list())
      a.close(CloseCodes.shuttingDown, 'orchestrator shutting down');
    await this.scaleEvents?.close();
    this.wss?.close();
    await this.gateways?.close();
    const closed = new Promise<void>((r) => (this.server ? this.server.close(() => r()) : r()));
    // Kept-alive sockets with no request in flight would otherwise hold the close open, and so
    // would one whose request was still being answered now and idles after it (an open dashboard
    // reloads its data at every change): close those as they idle.
    this.server?.closeIdleConnections();
    const idler = setInterval(() => this.server?.closeIdleConnections(), 100);
    await closed;
    clearInterval(idler);
    this.server?.closeAllConnections();
    await this.cluster?.stop();
    await this.database.close();
    this.log.info({ agentsLeftRunning: kept.size }, 'kici-orchestrator stopped');
  }
}
