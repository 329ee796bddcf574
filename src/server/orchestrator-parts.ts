import { defaultAdminTokenFile, ensureBootstrapToken } from '../access/bootstrap-token.js';
import { resolveInstanceId } from '../cluster/instance-id.js';
import { LiveScalerSettings } from '../cluster/live-settings.js';
import type { ScalerConfig } from '../config/index.js';
import { Dispatcher } from '../dispatch/dispatcher.js';
import { ScaleEventRouter } from '../scaler/events/router.js';
import type { ScalerManager } from '../scaler/manager.js';
import { ClusterSettingsRepo } from '../store/cluster-settings-repo.js';
import { createStore, type OpenedDatabase, type Store } from '../store/index.js';
import type { Clock } from '../util/clock.js';
import { errorMessage } from '../util/errors.js';
import type { Logger } from '../util/logger.js';
import { TypedEvents } from '../util/typed-events.js';
import { ClusterWiring, type ClusterTiming } from './cluster-wiring.js';
import { loadInstanceId } from './instance.js';
import { Metrics, STATIC_RUNNER } from './metrics.js';
import { emittingObserver, type OrchestratorEvents } from './orchestrator-events.js';
import { OrchestratorListeners } from './orchestrator-listeners.js';
import { instanceSettings, type OrchestratorOptions } from './orchestrator-options.js';
import { buildScaler } from './scaler-wiring.js';
import { StoreUpkeep } from './store-wiring.js';

/** Everything the orchestrator is made of, built but not yet started. */
export interface OrchestratorParts {
  store: Store;
  instanceId: string;
  adminToken: string;
  scaleEvents: ScaleEventRouter;
  live: LiveScalerSettings;
  scaler: ScalerManager | undefined;
  events: TypedEvents<OrchestratorEvents>;
  metrics: Metrics;
  cluster: ClusterWiring;
  dispatcher: Dispatcher;
  upkeep: StoreUpkeep;
  net: OrchestratorListeners;
}

/**
 * Build the parts on an open store: this instance's id and admin token, its agents' old rows
 * marked gone, the live settings read, then the scaler, the dispatcher and the store's upkeep.
 * The scaler asks where agents dial (`agentUrl`, `gatewayUrlFor`) only when it spawns.
 */
export async function assembleParts(d: {
  opts: OrchestratorOptions;
  config: ScalerConfig | undefined;
  database: OpenedDatabase;
  dataDir: string;
  clusterTiming: ClusterTiming;
  clock: Clock;
  log: Logger;
  agentUrl: () => string;
  gatewayUrlFor: (scalerName: string) => string | undefined;
}): Promise<OrchestratorParts> {
  const { opts, database, dataDir, clock, log } = d;
  const store = createStore(database.db, database.engine, database.syncGate);
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
  if (database.engine === 'postgres') store.agents.ownedBy(instanceId);
  await store.agents.markAllGone(new Date(clock.now()));
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
  const scaler = d.config
    ? await buildScaler(d.config, opts, {
        store,
        clock,
        log,
        instanceId,
        agentUrl: d.agentUrl,
        gatewayUrlFor: d.gatewayUrlFor,
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
  // The dispatcher asks about peers only once the cluster node runs (after listen).
  const cluster = new ClusterWiring({ opts, database, instanceId, live, timing: d.clusterTiming, log });
  const dispatcher = new Dispatcher({
    store,
    clock,
    logger: log,
    scaler,
    observer: emittingObserver(metrics, events),
    ...cluster.dispatchOptions(),
    ...(opts.reconnectGraceMs !== undefined ? { reconnectGraceMs: opts.reconnectGraceMs } : {}),
  });
  const upkeep = new StoreUpkeep({ opts, database, dataDir, dispatcher, metrics, clock, log });
  const net = new OrchestratorListeners({ tls: opts.tls, clock, log });
  return {
    store,
    instanceId,
    adminToken,
    scaleEvents,
    live,
    scaler,
    events,
    metrics,
    cluster,
    dispatcher,
    upkeep,
    net,
  };
}
