import type { ScalerType } from '../config/index.js';

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
  /** The backend's spawn() resolved. */
  settled: boolean;
  registered: boolean;
  /** Recovered after a restart; waiting for the agent to reconnect. */
  recovered: boolean;
  /** Pre-spawned by a warm pool (no job); `consumed` once it took a job. */
  warm: boolean;
  consumed: boolean;
  registeredAtMs?: number;
  /** Effective resources, for the warm-agent shape check and the ledger. */
  requests: { cpus: number; memBytes: number };
  limits: { cpus: number; memBytes: number };
  machinePool?: string | undefined;
  backendRef?: string;
  abort: AbortController;
  /** Aborted at registration: a registered agent's spawn can no longer time out. */
  registeredSignal?: AbortController;
}

export type AgentPhase = 'reserved' | 'spawning' | 'starting' | 'registered';

export function phaseOf(e: ManagedEntry): AgentPhase {
  if (e.registered) return 'registered';
  if (e.settled) return 'starting';
  if (e.spawnStartedAtMs !== undefined) return 'spawning';
  return 'reserved';
}
