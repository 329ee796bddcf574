/**
 * What recovery, reload and the warm pools may do to the manager's agents: the narrow ports they
 * receive instead of the whole ScalerManager. Living here (not in manager.ts) keeps those modules
 * free of any import back into the manager, so no import cycle runs through them.
 */
import type { ScalerEntry } from '../config/index.js';
import type { Store } from '../store/index.js';
import type { Clock } from '../util/clock.js';
import type { Logger } from '../util/logger.js';
import type { ManagedEntry } from './agent-book.js';
import type { AgentPhase } from './agent-lifecycle.js';
import type { ClassifiedSpawnError } from './core/spawn-errors.js';
import type { EffectiveResources } from './core/resources.js';
import type { RoutableLabelSet } from './core/routing.js';
import type { MachineLedger } from './ledger/machine-ledger.js';
import type { ScalerState } from './state.js';
import type { DestroyContext, ScaleResult, ScalerEventType } from './types.js';

export type TeardownReason = NonNullable<DestroyContext['reason']>;

/** The manager's collaborators that the lifecycle code reads. */
export interface LifecycleDeps {
  readonly store: Store;
  readonly clock: Clock;
  readonly instanceId: string;
  readonly ledger?: MachineLedger | undefined;
  readonly isDraining?: (() => boolean) | undefined;
}

/** The common core: the shared in-memory state and the one way an agent leaves it. */
export interface AgentLifecycle {
  readonly opts: LifecycleDeps;
  readonly state: ScalerState;
  readonly log: Logger;
  /** Destroy compute (idempotent), drop every record of the agent, release its reservation. */
  teardown(m: ManagedEntry, reason: TeardownReason): Promise<void>;
}

/** Restart recovery: adopts agents into the state, tears down the ones that never come back. */
export interface RecoveryHost extends AgentLifecycle {
  /** Log, count and report an error recovery carries on from (a failed revoke or re-reservation). */
  noteSwallowed(site: string, err: unknown, context?: Record<string, unknown>): void;
}

/** Reload: swaps config and backends in the state, then lets the pools and the sweep catch up. */
export interface ReloadHost extends AgentLifecycle {
  readonly warm: { configure(): void };
  sweepRetired(): void;
  notifyCapacityFreed(): void;
  /** Log, count and report an error a reload carries on from (a failed pool cap write). */
  noteSwallowed(site: string, err: unknown, context?: Record<string, unknown>): void;
}

/** Warm pools: start unbound agents through the normal reservation path; reap idle ones. */
export interface WarmPoolHost extends AgentLifecycle {
  provision(match: RoutableLabelSet, res: EffectiveResources): Promise<ScaleResult>;
  resourcesFor(match: RoutableLabelSet): EffectiveResources;
}

/** The manager's collaborators that a spawn reads, besides the common ones. */
export interface SpawnDeps extends LifecycleDeps {
  /** The URL spawned agents dial, per scaler. */
  readonly orchestratorUrlFor: (entry: ScalerEntry) => string;
  readonly spawnTimeoutMs?: number | undefined;
  readonly agentTokenTtlMs?: number | undefined;
  /** The token lifetime as it stands now (cluster settings), read per spawn over the fixed one. */
  readonly liveAgentTokenTtlMs?: (() => number) | undefined;
}

/** Spawning: reserve and record an agent, run the backend call, and fail it cleanly (spawn.ts). */
export interface SpawnHost extends AgentLifecycle {
  readonly opts: SpawnDeps;
  /** A graceful stop is under way: no spawn of any kind. */
  readonly stopping: boolean;
  /** Where a spawn's notes and failure go for the job it is bound to. */
  readonly hooks:
    | {
        onJobEvent(jobId: string, type: ScalerEventType, detail: string): void;
        onSpawnFailed(
          jobId: string,
          error: ClassifiedSpawnError,
          source: { scalerName: string; backendType: string },
        ): void;
        onCapLockFailure?(reason: 'contended' | 'unreachable'): void;
      }
    | undefined;
  /** Forget an agent in memory and give its capacity back (synchronously). */
  forget(m: ManagedEntry): void;
  /** Tell the orchestrator something about a job now, or once its run is stored (job-reports.ts). */
  reportFor(jobId: string, report: () => void): void;
  /** The scaler's agents start before their records are written (ScalerManagerViews). */
  launchesProvisionally(scalerName: string): boolean;
  /** A phase change, through the lifecycle table. */
  move(m: ManagedEntry, to: AgentPhase): void;
  noteSwallowed(site: string, err: unknown, context?: Record<string, unknown>): void;
}
