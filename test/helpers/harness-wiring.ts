/**
 * What a manager harness is built from, and its wiring: a real ScalerManager and (by default) a
 * real Dispatcher, joined the way `src/server/orchestrator.ts` joins them, with hooks that record
 * what the manager reports.
 */
import { pino } from 'pino';
import type { ScalerConfig, ScalerConfigInput } from '../../src/config/index.js';
import { Dispatcher } from '../../src/dispatch/dispatcher.js';
import type { ProvisionBackoffOptions } from '../../src/scaler/core/backoff.js';
import type { ClassifiedSpawnError } from '../../src/scaler/core/spawn-errors.js';
import type { MachineLedger } from '../../src/scaler/ledger/machine-ledger.js';
import { ScalerManager } from '../../src/scaler/manager.js';
import type { ScalerEventType } from '../../src/scaler/types.js';
import type { Store } from '../../src/store/index.js';
import type { ManualClock } from '../../src/util/clock.js';
import type { Logger } from '../../src/util/logger.js';
import type { RecordingBackend } from './recording-backend.js';

export interface HarnessOptions {
  /** A parsed config, or file input (parsed with the real schema). */
  config: ScalerConfig | ScalerConfigInput | Record<string, unknown>;
  /** Share a store (restart tests); a fresh PGlite copy otherwise (closed by `close()`). */
  store?: Store;
  clock?: ManualClock;
  instanceId?: string;
  spawnTimeoutMs?: number;
  agentTokenTtlMs?: number;
  backoff?: ProvisionBackoffOptions;
  ledger?: MachineLedger;
  /** Wire a real Dispatcher (default true). */
  dispatcher?: boolean;
  isDraining?: () => boolean;
  /** Tune each backend as it is built (also the ones a reload builds). */
  configureBackend?: (b: RecordingBackend) => void;
  /** A destroyed connected agent drops its socket, like a killed process (default true). */
  killOnDestroy?: boolean;
  /** The manager's logger (silent by default). */
  logger?: Logger;
}

/** What the manager reported through its hooks. */
export interface HarnessHooks {
  capacityFreed: number;
  jobEvents: { jobId: string; type: ScalerEventType; detail: string }[];
  spawnFailed: { jobId: string; error: ClassifiedSpawnError }[];
}

/** The manager on these backends, and the dispatcher unless `opts.dispatcher` is false. */
export function wireManager(
  opts: HarnessOptions,
  parts: {
    config: ScalerConfig;
    backends: RecordingBackend[];
    store: Store;
    clock: ManualClock;
    hooks: HarnessHooks;
  },
): { manager: ScalerManager; dispatcher: Dispatcher | undefined } {
  const { config, backends, store, clock, hooks } = parts;
  const manager = new ScalerManager({
    config,
    backends,
    store,
    clock,
    logger: opts.logger ?? pino({ level: 'silent' }),
    instanceId: opts.instanceId ?? 'orch-test',
    orchestratorUrlFor: () => 'ws://127.0.0.1:1/ws',
    ...(opts.spawnTimeoutMs !== undefined ? { spawnTimeoutMs: opts.spawnTimeoutMs } : {}),
    ...(opts.agentTokenTtlMs !== undefined ? { agentTokenTtlMs: opts.agentTokenTtlMs } : {}),
    ...(opts.backoff ? { backoff: opts.backoff } : {}),
    ...(opts.ledger ? { ledger: opts.ledger } : {}),
    ...(opts.isDraining ? { isDraining: opts.isDraining } : {}),
  });
  if (opts.dispatcher === false) {
    manager.setHooks({
      onCapacityFreed: () => {
        hooks.capacityFreed += 1;
      },
      onJobEvent: (jobId, type, detail) => hooks.jobEvents.push({ jobId, type, detail }),
      onSpawnFailed: (jobId, error) => hooks.spawnFailed.push({ jobId, error }),
    });
    return { manager, dispatcher: undefined };
  }
  const dispatcher = new Dispatcher({
    store,
    clock,
    logger: pino({ level: 'silent' }),
    scaler: manager,
  });
  // As src/server/orchestrator.ts wires them.
  manager.setHooks(
    {
      onCapacityFreed: () => {
        hooks.capacityFreed += 1;
        void dispatcher.requestPump();
      },
      onJobEvent: (jobId, type, detail) => hooks.jobEvents.push({ jobId, type, detail }),
      onSpawnFailed: (jobId, error) => {
        hooks.spawnFailed.push({ jobId, error });
        const q = dispatcher.queue.get(jobId);
        if (q) q.waiting = `${error.kind}: ${error.message}`;
        store.jobs.setProvisioningError(jobId, `${error.kind}: ${error.message}`).catch(() => {});
      },
    },
    dispatcher.registryView(),
  );
  return { manager, dispatcher };
}
