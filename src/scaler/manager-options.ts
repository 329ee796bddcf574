import type { ScalerConfig, ScalerEntry } from '../config/index.js';
import type { Store } from '../store/index.js';
import type { Clock } from '../util/clock.js';
import type { Logger } from '../util/logger.js';
import type { ProvisionBackoffOptions } from './core/backoff.js';
import type { ClassifiedSpawnError } from './core/spawn-errors.js';
import type { ScalerEventEmitterLike } from './events/payloads.js';
import type { MachineLedger } from './ledger/machine-ledger.js';
import type { ScalerBackend, ScalerEventType } from './types.js';

/**
 * What the ScalerManager is built from and whom it tells: its collaborators, passed in, and the
 * hooks the orchestrator sets once it is wired. Kept out of manager.ts so its read-only base
 * (manager-views.ts) can name the options without importing the manager back.
 */

export interface ScalerHooks {
  /** Capacity came back: waiting jobs should be offered again. */
  onCapacityFreed(): void;
  /** A lifecycle note for the job a spawn is bound to. */
  onJobEvent(jobId: string, type: ScalerEventType, detail: string): void;
  /**
   * A spawn bound to this job failed; the classified reason belongs on the waiting job. `source`:
   * the scaler and backend type that failed (the spawn may be gone by the time this is told, see
   * job-reports.ts).
   */
  onSpawnFailed(
    jobId: string,
    error: ClassifiedSpawnError,
    source: { scalerName: string; backendType: string },
  ): void;
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
