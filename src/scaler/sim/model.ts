import type { ScalerEntry } from '../../config/index.js';
import type { ResourceAmount } from '../core/resources.js';
import type { RoutableLabelSet } from '../core/routing.js';
import type { EventQueue } from './event-queue.js';
import type { PoolCounters } from './stats.js';
import type { Timeline } from './timeline.js';
import type { TraceJob } from './trace.js';

/** The simulator's inputs, outputs and the world it keeps: label-set pools, job groups, agents. */

export interface SimOptions {
  /** Spawn time of one agent of this scaler decided at `nowMs`, ms (from flags or measured latencies). */
  spawnMs: (entry: ScalerEntry, nowMs: number) => number;
  /** How long an agent that found no job waits before it leaves (ms; warm agents wait for work). */
  agentIdleMs?: number;
  /** From a job's end until its agent's capacity is free again (exit, disconnect, destroy), ms. */
  releaseMs?: number;
  /** The release time of a job ending at `nowMs`, when it follows the host over time (wins over `releaseMs`). */
  releaseAt?: (entry: ScalerEntry, nowMs: number) => number;
  /**
   * From an agent being free for a job (registered, or idle when the job came) until the job starts
   * on it: the claim, the hand-over and the agent's start of the job. Not zero even for a warm agent.
   */
  dispatchMs?: number;
  /** Points on the over-time chart. */
  timelinePoints?: number;
}

export interface SimRaw {
  pools: PoolCounters[];
  replayed: number;
  /** Jobs the trace shows never started (not replayed). */
  skipped: number;
  /** Jobs no label set serves, or still queued when the replay ran dry. */
  unserved: number;
  startMs: number;
  endMs: number;
  timeline: Timeline;
  /** Highest agents and summed requests held at once, per scaler and over all. */
  scalerPeaks: Record<string, Usage>;
  globalPeak: Usage;
}

export interface Usage {
  agents: number;
  cpus: number;
  memBytes: number;
}

export interface Group {
  labels: string[];
  resources: TraceJob['resources'];
  match: RoutableLabelSet | undefined;
  pool: Pool | undefined;
  queue: EventQueue<number>;
  /** Spawns made for this group's jobs that have not registered yet. */
  inflight: number;
  /** Jobs already counted as held by a cap that still wait without a spawn (oldest first). */
  blocked: number;
}

import type { WarmTarget } from './warm-target.js';

export interface Pool {
  entry: ScalerEntry;
  match: RoutableLabelSet;
  c: PoolCounters;
  idle: Set<Agent>;
  warmIdle: number;
  warmPending: number;
  /** The size in force at the last warm pass. */
  warmSize: number;
  warmTarget: WarmTarget;
  groups: Group[];
}

export interface Agent {
  id: string;
  pool: Pool;
  group: Group | undefined;
  warm: boolean;
  requests: ResourceAmount;
  bornMs: number;
}

export type Ev =
  | { k: 'registered'; a: Agent }
  | { k: 'done'; a: Agent }
  | { k: 'gone'; a: Agent }
  | { k: 'idle-exit'; a: Agent }
  | { k: 'warm'; tick: boolean };
