import type { ScalerType } from '../config/index.js';
import type { AgentOrigin, AgentPhase } from './agent-lifecycle.js';

/** Everything the manager knows about one agent it spawned, from reservation until destroy. */
export interface ManagedEntry {
  agentId: string;
  scalerName: string;
  type: ScalerType;
  labelSet: string[];
  labelSetKey: string;
  fullLabels: string[];
  gate: string[];
  boundJobId: string | undefined;
  runId: string | undefined;
  createdAtMs: number;
  /** Set when the spawn semaphore admitted the spawn. */
  spawnStartedAtMs?: number;
  /** The same moment on the monotonic clock: the spawn deadline is measured on it (absent after a restart). */
  spawnStartedMono?: number;
  /** Where it is in its life; changed only through `transition` (agent-lifecycle.ts). */
  phase: AgentPhase;
  /** Fixed at creation: spawned for a warm pool, adopted after a restart. */
  readonly origin: AgentOrigin;
  registeredAtMs?: number;
  /** Effective resources, for the warm-agent shape check and the ledger. */
  requests: { cpus: number; memBytes: number };
  limits: { cpus: number; memBytes: number };
  machinePool?: string | undefined;
  backendRef?: string;
  abort: AbortController;
  /** Aborted at registration: a registered agent's spawn can no longer time out. */
  registeredSignal?: AbortController;
  /**
   * Set while its spawn record may still be unwritten (a provisional launch, spawn.ts): writes it
   * if not asked for yet, and resolves once it is written.
   */
  record?: () => Promise<void>;
}

export type { AgentPhase };

export function phaseOf(e: ManagedEntry): AgentPhase {
  return e.phase;
}

/**
 * Warm stock a job could still take (in flight or idle): pool-spawned and never given a job. An
 * adopted warm agent that had registered before the restart may hold a job, so it is not stock.
 */
export function isWarmStock(e: ManagedEntry): boolean {
  if (!e.origin.warm || e.origin.recovered?.registeredBefore) return false;
  return e.phase !== 'busy' && e.phase !== 'destroying';
}
