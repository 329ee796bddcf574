import { cancelAnywhere } from '../cluster/remote-cancel.js';
import type { ClaimStore } from './claim-store.js';
import type { ScalerAuditor } from '../scaler/audit/auditor.js';
import type { OpenedDatabase } from '../store/index.js';
import type { Clock } from '../util/clock.js';
import type { Logger } from '../util/logger.js';
import type { HttpApiDeps } from './http-api.js';
import type { OrchestratorListeners, AgentSessionWiring } from './orchestrator-listeners.js';
import { agentHeartbeatMs, type OrchestratorOptions } from './orchestrator-options.js';
import type { OrchestratorParts } from './orchestrator-parts.js';
import type { StoreProbe } from './readiness.js';
import { vmNetworkCheck } from './vm-network-check.js';

/** Where the orchestrator stands: read by /readyz and by the agent sessions. */
export interface LifecycleView {
  isReady(): boolean;
  isDraining(): boolean;
  isStopping(): boolean;
}

/** What the HTTP API and the agent sessions are given, then serve them on host:port. */
export function listenForApiAndAgents(
  net: OrchestratorListeners,
  host: string,
  port: number,
  d: {
    parts: OrchestratorParts;
    opts: OrchestratorOptions;
    database: OpenedDatabase;
    probe: StoreProbe;
    clock: Clock;
    log: Logger;
    life: LifecycleView;
    reloadScaler: HttpApiDeps['reloadScaler'];
    auditor: () => ScalerAuditor | undefined;
    claimStore: ClaimStore;
    onAgentRegistered: (agentId: string) => void;
  },
): Promise<void> {
  const { parts: p, opts, database, clock } = d;
  const api: HttpApiDeps = {
    store: p.store,
    dispatcher: p.dispatcher,
    clock,
    metricsPublic: opts.metricsPublic ?? false,
    metrics: p.metrics,
    isReady: () => d.life.isReady(),
    isDraining: () => d.life.isDraining(),
    logger: d.log,
    readiness: d.probe,
    reloadScaler: d.reloadScaler,
    clusterStatus: () => p.cluster.status(),
    instanceId: p.instanceId,
    peerParts: () => p.cluster.peerParts(),
    clusterSettings: p.live,
    vmNetworkCheck: () => vmNetworkCheck(p.scaler?.config, opts.hostEnv ?? process.env),
    ...(database.engine === 'postgres' && {
      cancelJob: (id: string) => cancelAnywhere(p.cluster.cancelDeps(p.store, p.dispatcher), id),
    }),
    scalerConfigPath: opts.scalerConfigPath,
    retention: p.upkeep.retention,
    snapshot: database.snapshot,
    diskSpace: p.upkeep.disk,
    auditor: d.auditor,
    backoffResets: () => p.cluster.backoffResets,
  };
  const agents: AgentSessionWiring = {
    store: p.store,
    dispatcher: p.dispatcher,
    clock,
    logger: d.log,
    heartbeatIntervalMs: agentHeartbeatMs(opts),
    isStopping: () => d.life.isStopping(),
    leaveGraceMs: opts.agentLeaveGraceMs,
    onRegistered: d.onAgentRegistered,
    claimStore: d.claimStore,
  };
  return net.listen(host, port, api, agents);
}
