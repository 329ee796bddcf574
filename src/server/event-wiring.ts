import type { Dispatcher } from '../dispatch/dispatcher.js';
import { EventProvisionReaper, type LiveReapTuning } from '../scaler/event-reaper.js';
import type { ScaleEventRouter } from '../scaler/events/router.js';
import type { ReapWindows } from '../scaler/reap-decide.js';
import { DEFAULT_SPAWN_TIMEOUT_MS, type ScalerManager } from '../scaler/manager.js';
import type { OpenedDatabase } from '../store/index.js';
import type { Clock } from '../util/clock.js';
import type { Logger } from '../util/logger.js';
import { EventMetrics } from './event-metrics.js';
import type { Metrics } from './metrics.js';

/**
 * Connect the scale-event router to the queue (job: targets), the metrics and the backends (a
 * given-up delivery shows in status and diagnose), and build the provision reaper. The reaper is
 * built whenever there is a scaler: a reload may add an event scaler later. Its leader-only part
 * runs as one of the cluster's leader tasks.
 */
export function wireEventScaling(deps: {
  router: ScaleEventRouter;
  dispatcher: Dispatcher;
  metrics: Metrics;
  scaler: ScalerManager | undefined;
  database: Pick<OpenedDatabase, 'db' | 'engine'>;
  instanceId: string;
  clock: Clock;
  claimRetentionMs?: number | undefined;
  logger: Logger;
  spawnTimeoutMs: number | undefined;
  reapIntervalMs: number | undefined;
  reapWindows?: Partial<Omit<ReapWindows, 'spawnTimeoutMs'>> | undefined;
  /** Cluster-wide values read on each use over the fixed ones above. */
  live?: LiveReapTuning | undefined;
}): EventProvisionReaper | undefined {
  const { scaler } = deps;
  const counts = new EventMetrics(
    deps.metrics.registry,
    () => scaler?.backendList() ?? [],
    () => scaler?.adoptionLookupFailures ?? 0,
  );
  deps.router.bind((spec, sealed) => deps.dispatcher.submit(spec, sealed), {
    scaleUpEmitted: (s) => counts.scaleUpEmitted(s),
    scaleDownEmitted: (s, reason) => counts.scaleDownEmitted(s, reason),
    provisionTimedOut: (s) => counts.provisionTimedOut(s),
    eventUnmatched: (name, reason) => counts.eventUnmatched(name, reason),
    deliveryGivenUp: (s, problem) => {
      counts.deliveryGivenUp(s);
      scaler
        ?.backendList()
        .find((b) => b.name === s)
        ?.noteDeliveryGivenUp?.(problem);
    },
  });
  if (!scaler) return undefined;
  return new EventProvisionReaper({
    db: deps.database.db,
    engine: deps.database.engine,
    manager: scaler,
    instanceId: deps.instanceId,
    clock: deps.clock,
    ...(deps.claimRetentionMs !== undefined ? { claimRetentionMs: deps.claimRetentionMs } : {}),
    logger: deps.logger,
    spawnTimeoutMs: deps.spawnTimeoutMs ?? DEFAULT_SPAWN_TIMEOUT_MS,
    intervalMs: deps.reapIntervalMs ?? 30_000,
    ...(deps.reapWindows ? { windows: deps.reapWindows } : {}),
    ...(deps.live ? { live: deps.live } : {}),
    connectedHere: (agentId) => deps.dispatcher.registry.get(agentId) !== undefined,
  });
}
