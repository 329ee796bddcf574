import type { LabelSetConfig, ScalerEntry, ScalerType } from '../config/index.js';

/** Lifecycle notes a backend reports while it provisions; they reach the waiting job's timeline. */
export type ScalerEventType =
  | 'scaler.provisioning'
  | 'scaler.network'
  | 'scaler.ready'
  | 'scaler.failed'
  | 'agent.connecting'
  /** A line the agent process itself wrote (stdout/stderr), captured by the backend. */
  | 'agent.output';

export interface ScalerEvent {
  agentId: string;
  eventType: ScalerEventType;
  detail: string;
  timestampMs: number;
}

/** Limits a backend enforces (cgroups, container limits, VM size). Zero means "not limited". */
export interface EffectiveLimits {
  cpus: number;
  memBytes: number;
}

export interface SpawnRequest {
  agentId: string;
  /** The label set as declared in the config (canonical). */
  labelSet: string[];
  /** Declared labels plus kici:agent/scaler/role labels and platform taints; the token is bound to these. */
  fullLabels: string[];
  orchestratorUrl: string;
  token: string;
  limits: EffectiveLimits | undefined;
  boundJobId: string | undefined;
  runId: string | undefined;
  signal: AbortSignal;
  onEvent: (type: ScalerEventType, detail: string) => void;
}

export type AgentState = 'spawning' | 'running' | 'destroying';

export interface ManagedAgent {
  id: string;
  labelSet: string[];
  /** What the backend needs to find the compute again after a restart (pid, container id, ...). */
  backendRef: string;
  spawnedAt: number;
  state: AgentState;
}

export interface DestroyContext {
  reason?: 'job-complete' | 'disconnected' | 'spawn-timeout' | 'spawn-failed' | 'shutdown' | 'orphan';
}

export type ValidationResult = { valid: true } | { valid: false; errors: string[] };

/** One interface for every backend; policy (caps, backoff, warm pools) stays in the manager. */
export interface ScalerBackend {
  readonly name: string;
  readonly type: ScalerType;
  readonly spawnsOnLocalHost: boolean;
  labelSets: LabelSetConfig[];
  maxAgents: number;
  /** Agents this backend holds compute for, spawning ones included. */
  getActiveCount(): number;
  spawn(req: SpawnRequest): Promise<ManagedAgent>;
  /** Idempotent: destroying an unknown id is a no-op. */
  destroy(agentId: string, ctx?: DestroyContext): Promise<void>;
  /** The agent registered: a later exit is a normal disconnect, not a failed start. */
  markRegistered?(agentId: string): void;
  /** Reclaim compute for an id this backend does not track, using host-local evidence only. */
  reapUnowned?(agentId: string, backendRef: string | null): Promise<boolean>;
  /** Re-track compute that survived an orchestrator restart; false when it is gone. */
  adopt?(agentId: string, labelSet: string[], backendRef: string | null): Promise<boolean>;
  reload(labelSets: LabelSetConfig[], opts: { maxAgents?: number; entry?: ScalerEntry }): ValidationResult;
  shutdownAll(): Promise<void>;
  getScalerContext?(agentId: string): Record<string, unknown> | undefined;
}

export type ScaleResult =
  | { action: 'spawning'; agentId: string; scalerName: string; backendType: ScalerType }
  | { action: 'at-capacity'; reason: string }
  | { action: 'no-backend'; reason: string }
  | { action: 'skipped'; reason: string; retryAfterMs?: number };

/** What the manager needs to know about a job to scale for it. */
export interface ScaleJob {
  id: string;
  runId: string;
  runsOn: string[];
  resources?: { requests?: { cpus?: number; memory?: string }; limits?: { cpus?: number; memory?: string } };
  container?: { image: string };
  role?: 'execution' | 'build' | 'init';
  /** Label sets carrying any of these labels may not serve the job. */
  excludeLabels?: string[];
}
