import type { Dispatcher } from '../dispatch/dispatcher.js';
import { ScalerAuditor } from '../scaler/audit/auditor.js';
import type { EventProvisionReaper } from '../scaler/event-reaper.js';
import type { ScaleEventRouter } from '../scaler/events/router.js';
import type { ScalerHooks, ScalerManager } from '../scaler/manager.js';
import type { LiveScalerSettings } from '../cluster/live-settings.js';
import type { OpenedDatabase, Store } from '../store/index.js';
import type { Clock } from '../util/clock.js';
import type { Logger } from '../util/logger.js';
import { countSwallowed, swallow } from '../util/swallowed-errors.js';
import type { TypedEvents } from '../util/typed-events.js';
import { wireEventScaling } from './event-wiring.js';
import type { Metrics } from './metrics.js';
import type { OrchestratorEvents } from './orchestrator-events.js';
import type { OrchestratorOptions } from './orchestrator-options.js';
import type { StoreProbe } from './readiness.js';
import { registerScalerMetrics, type ScalerSources } from './scaler-metrics.js';

/**
 * Connect the scaler to the rest of the orchestrator, in this order: its auditor, its metrics (read
 * through `sources` at scrape time), the scale-event routing and provision reaper, a re-read of the
 * queue when the store comes back, and the scaler's hooks. Nothing is started here.
 */
export function wireScalerSide(d: {
  opts: OrchestratorOptions;
  scaler: ScalerManager | undefined;
  scaleEvents: ScaleEventRouter;
  dispatcher: Dispatcher;
  store: Store;
  database: OpenedDatabase;
  instanceId: string;
  live: LiveScalerSettings;
  probe: StoreProbe;
  metrics: Metrics;
  events: TypedEvents<OrchestratorEvents>;
  sources: Required<ScalerSources>;
  clock: Clock;
  log: Logger;
}): { auditor: ScalerAuditor | undefined; reaper: EventProvisionReaper | undefined } {
  const { opts, scaler, dispatcher, store, metrics, clock, log } = d;
  const auditor = scaler ? new ScalerAuditor(scaler, store, clock, log) : undefined;
  registerScalerMetrics(metrics.registry, d.sources);
  const reaper = wireEventScaling({
    router: d.scaleEvents,
    dispatcher,
    metrics,
    scaler,
    database: d.database,
    instanceId: d.instanceId,
    clock,
    claimRetentionMs: opts.claimRetentionMs,
    logger: log,
    spawnTimeoutMs: opts.spawnTimeoutMs,
    reapIntervalMs: opts.reapIntervalMs,
    reapWindows: opts.reapWindows,
    live: d.live.reapTuning(),
  });
  d.probe.whenRecovered(() => void dispatcher.resyncQueued().catch(swallow(log, 'store.resync-queued')));
  scaler?.setHooks(
    scalerHooks({ dispatcher, store, metrics, events: d.events, clock, log }),
    dispatcher.registryView(),
  );
  return { auditor, reaper };
}

/** What the scaler tells the rest of the orchestrator: freed capacity, job notes, failed spawns. */
export function scalerHooks(d: {
  dispatcher: Dispatcher;
  store: Store;
  metrics: Metrics;
  events: TypedEvents<OrchestratorEvents>;
  clock: Clock;
  log: Logger;
}): ScalerHooks {
  const { dispatcher, store, metrics, events, clock, log } = d;
  return {
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
    onSpawnFailed: (jobId, err, source) => {
      metrics.spawnFailures.inc({
        scaler: source.scalerName,
        backend: source.backendType,
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
  };
}
