import type { ScalerEntry, ScalerType } from '../config/index.js';
import type { ImageAuthSpec } from '../jobs/image-auth.js';
import type { BackendCapabilities } from './backend-capabilities.js';
import type { CleanupOrphansOptions, InventoryItem } from './backend-inventory.js';

export type { BackendCapabilities } from './backend-capabilities.js';
export type { CleanupOrphansOptions, InventoryItem, InventoryKind, OrphanItem } from './backend-inventory.js';

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

/**
 * How a spawned agent proves who it is: a scoped token it presents in `register`, or a one-time
 * claim code it redeems first (for compute the orchestrator cannot hand a secret to directly).
 */
export type AgentAuth = { kind: 'token'; token: string } | { kind: 'claim'; code: string };

/** Everything a backend needs to start one agent. */
export interface SpawnContext {
  agentId: string;
  /** The label set as declared in the config (canonical). */
  labelSet: string[];
  /** Declared labels plus kici:agent/scaler/role labels and platform taints; the credential is bound to these. */
  fullLabels: string[];
  /** Labels a job must carry to land on this agent (mandatoryLabels ∪ platform taints). */
  mandatoryLabels: string[];
  /** Platform taint tokens the agent carries as labels. */
  taints: string[];
  orchestratorUrl: string;
  auth: AgentAuth;
  limits: EffectiveLimits | undefined;
  /** The job this agent is spawned for; undefined for a warm agent. */
  boundJobId: string | undefined;
  runId: string | undefined;
  /** The bound job's `container.image`, for backends that run the job inside it. */
  image: string | undefined;
  /**
   * Registry credentials for pulling `image`, as secret-store references: the backend reads the
   * values when it pulls, so they never sit in the manager's state or reach a log.
   */
  imageAuth?: ImageAuthSpec | undefined;
  /** Aborted on the spawn deadline, on destroy and on shutdown: the backend must then leave no compute. */
  signal: AbortSignal;
  onEvent: (type: ScalerEventType, detail: string) => void;
  /**
   * Present when the spawn's record (with the agent's token) is not yet written, which happens only
   * for a backend whose capabilities say `provisionalLaunch`. The backend calls it once, before it
   * starts anything, or, where its launcher undoes a start by itself should this process die before
   * the record exists, right after asking for that start (a spawn that fails before starting
   * anything need not call it). It resolves once the record is written and rejects when it cannot
   * be; nothing the backend started may outlive a rejection.
   */
  record?: (() => Promise<void>) | undefined;
}

/** Older name of SpawnContext. */
export type SpawnRequest = SpawnContext;

export type AgentState = 'spawning' | 'running' | 'destroying';

export interface ManagedAgent {
  id: string;
  labelSet: string[];
  /** What the backend needs to find the compute again after a restart (pid, container id, ...). */
  backendRef: string;
  spawnedAt: number;
  state: AgentState;
}

/** Why compute is torn down; backends may log it or treat some reasons differently (keep logs on a failure). */
export type DestroyReason =
  | 'job-complete'
  | 'idle'
  | 'heartbeat-timeout'
  | 'spawn-timeout'
  | 'spawn-failed'
  | 'drain'
  | 'shutdown'
  | 'orphan'
  | 'disconnected';

export interface DestroyContext {
  reason: DestroyReason;
  /**
   * Peer-adoptable backends: the targets recorded at spawn, where the scale-down goes when this
   * orchestrator tears down a provision it did not spawn; the others ignore it.
   */
  targets?: string[] | undefined;
}

/**
 * What a public backend's destroy() takes from an embedding caller: both fields optional, and the
 * whole context may be left out (an unnamed teardown is logged and reported as a shutdown).
 */
export interface ScalerDestroyContext {
  reason?: DestroyReason | undefined;
  /** Event backends: where the scale-down goes (the targets recorded when it was spawned). */
  targets?: string[] | undefined;
}

/** The callback of the positional spawn form: each lifecycle note as one event. */
export type ScalerEventCallback = (event: ScalerEvent) => void;

/**
 * The optional sixth argument of the positional spawn form: what the caller knows about the job the
 * agent is for. Everything else (full labels, token, signal) the backend derives itself.
 */
export interface PositionalSpawnContext {
  boundJobId?: string | undefined;
  runId?: string | undefined;
  /** The bound job's `container.image`. */
  image?: string | undefined;
  /** Labels a job must carry to land on this agent; the scaler's own when absent. */
  mandatoryLabels?: string[] | undefined;
  /** Platform taint tokens the agent carries as labels; the scaler's platform's when absent. */
  taints?: string[] | undefined;
}

export type ValidationResult = { valid: true } | { valid: false; errors: string[] };

/**
 * Where a public backend mints the token of an agent it spawns by the positional form. The store's
 * token repository has this shape; the token is bound to exactly `labels`.
 */
export interface AgentTokenStore {
  mint(spec: {
    agentId: string;
    labels: string[];
    kind: 'ephemeral';
    ttlMs?: number | undefined;
    now: Date;
  }): Promise<{ token: string }>;
}

/** The name the seed gives a backend's host-tool requirement. */
export type ToolRequirement = RequiredTool;

/** A host tool a backend needs, how to find it, and what to tell the operator when it is missing. */
export interface RequiredTool {
  /** Shown to the operator: `docker`, `nft`, `agent binary for [linux]`. */
  name: string;
  find:
    | { kind: 'command'; command: string }
    | { kind: 'path'; path: string }
    /** Any one of these commands on PATH will do (docker or podman). */
    | { kind: 'any-command'; commands: string[] };
  /** The fix, in words. */
  fix: string;
  /** The entry's field that names this tool (`labelSets[0].binaryPath`), when one does. */
  field?: string;
  /**
   * `fatal`: start-up fails and a reload adding the scaler is refused. `spawn`: logged as a warning;
   * each spawn fails with a classified reason (and backs off) until it is fixed.
   */
  severity: 'fatal' | 'spawn';
}

/** Agent output a backend kept (a container's log, a VM's console). */
export interface LogCapture {
  /** The kept lines, oldest first, then each new line until close() or the agent is gone. */
  lines(): AsyncIterable<string>;
  /** The last lines (at most 50 unless asked for fewer), oldest first, joined by newlines. */
  tail(maxLines?: number): string;
  /** Ends every lines() iteration of this capture. */
  close(): void;
}

/**
 * Takes work that records an agent's registration but decides nothing on the way to its first job
 * (a write, a backend's next spare), to do it later: the session holds it until that job has started
 * (held-bookkeeping.ts). Without one the work is done at once (registration.ts, `atOnce`).
 */
export type LaterWork = (work: () => void) => void;

/** One interface for every backend; policy (caps, backoff, warm pools) stays in the manager. */
export interface ScalerBackend {
  readonly name: string;
  readonly type: ScalerType;
  readonly capabilities: BackendCapabilities;
  /** Agents this backend holds compute for, spawning ones included. */
  getActiveCount(): number;
  /** Host tools this backend needs for `entry` (checked by preflight at start-up and on reload). */
  getRequiredTools(entry: ScalerEntry): RequiredTool[];
  /** Start one agent. Rejects (leaving no compute) when it fails or `ctx.signal` aborts. */
  spawn(ctx: SpawnContext): Promise<ManagedAgent>;
  /** Idempotent: a second or concurrent call for the same id, or an unknown id, tears nothing down again. */
  destroy(agentId: string, ctx: DestroyContext): Promise<void>;
  /**
   * The agent registered: a later exit is a normal disconnect, not a failed start. Work its first
   * job does not wait for goes to `later`, which runs it once that job has started (or at once).
   */
  markRegistered?(agentId: string, later?: LaterWork): void;
  getLogCapture?(agentId: string): LogCapture | undefined;
  /**
   * Remove compute this backend started earlier that no live agent owns (and stale firewall rules);
   * returns how many. With `dryRun` nothing is removed and the count is what would be. Each item is
   * reported to `onItem` (the `reap-orphans` command lists them).
   */
  cleanupOrphans?(isRegistered: (agentId: string) => boolean, opts?: CleanupOrphansOptions): Promise<number>;
  /**
   * Everything of this scaler's that exists right now (live compute, TAPs, rule sets, provisions),
   * from the backend's own evidence, never another orchestrator's. Rejects when it cannot tell.
   */
  inventory?(): Promise<InventoryItem[]>;
  /** Reclaim compute for an id this backend does not track, using its own evidence only; never foreign compute. */
  reapUnowned?(agentId: string, backendRef: string | null): Promise<boolean>;
  /**
   * Re-track compute that survived an orchestrator restart. `true`: alive and tracked again;
   * `false`: evidence that it is gone; rejects when it cannot tell (engine unreachable, unreadable
   * state), and then the caller keeps the record and token and asks again later. A peer-adoptable
   * backend also takes the targets recorded at spawn, where its later scale-down goes.
   */
  adopt?(
    agentId: string,
    labelSet: string[],
    backendRef: string | null,
    targets?: string[],
  ): Promise<boolean>;
  /**
   * Peer-adoptable backends: stop tracking a provision without tearing it down, because a peer
   * answers for it now (it adopted it) or its record is gone (the reaper lease holder removed it).
   */
  forget?(agentId: string): void;
  /** Would this backend accept `entry` as its new config? Changes nothing. */
  checkReload(entry: ScalerEntry): ValidationResult;
  /** Take `entry` (already checked) for new spawns; running agents are untouched. Cannot fail. */
  applyReload(entry: ScalerEntry): void;
  /** This orchestrator is stopping: destroy every agent when `lifetime` is `orchestrator`, none when `cluster`. */
  shutdownAll(): Promise<void>;
  /** This orchestrator is stopping, its agents torn down or kept: let go of host helpers it started. */
  release?(): void;
  getScalerContext?(agentId: string): Record<string, unknown> | undefined;
  /**
   * Backends that run jobs on the orchestrator's own host: how each label set's jobs are kept from
   * the orchestrator's secrets, and the risk of one that is not (status and diagnose show it).
   */
  confinement?(): { labelSet: string; mode: string; chosen: string; risk: string | null }[];
  /**
   * Backends that enforce agent limits on this host themselves: which mechanism holds them
   * (`off` when not asked for), and the fix when none could (diagnose shows it).
   */
  limitsEnforcement?(): { strategy: string; enforced: boolean; message: string; fix: string | null };
  /**
   * The address on this host where this backend's agents reach the host (a bridge's gateway), when
   * they run behind one. An orchestrator listening on loopback opens an agent-only listener there.
   */
  readonly agentGateway?: string | undefined;
  /**
   * Which agents sit behind `agentGateway`: 'all' (the default) dial it instead of a loopback URL;
   * 'containers' means only those in containers, whose spawn points them there, while the rest
   * (host processes) keep the scaler's own URL.
   */
  readonly agentGatewayScope?: 'all' | 'containers';
  /** Event backends: a provisioning target gave up delivering a scale event (status and diagnose show it). */
  noteDeliveryGivenUp?(problem: DeliveryProblem): void;
  deliveryProblem?(): DeliveryProblem | undefined;
}

/** The last scale event a provisioning target gave up on, and why. */
export interface DeliveryProblem {
  eventId: string;
  event: string;
  target: string;
  agentId: string;
  lastError: string;
  atMs: number;
}

export type ScaleResult =
  | {
      action: 'spawning';
      agentId: string;
      scalerName: string;
      backendType: ScalerType;
      /**
       * A provisional launch (BackendCapabilities.provisionalLaunch): settles once the backend has
       * asked for the agent's start, or the spawn has ended. A caller with store writes of its own
       * waits for it, so they do not come between the request and the start.
       */
      launched?: Promise<void>;
    }
  | { action: 'at-capacity'; reason: string }
  | { action: 'no-backend'; reason: string }
  | { action: 'skipped'; reason: string; retryAfterMs?: number };

/** What the manager needs to know about a job to scale for it. */
export interface ScaleJob {
  id: string;
  runId: string;
  runsOn: string[];
  resources?: { requests?: { cpus?: number; memory?: string }; limits?: { cpus?: number; memory?: string } };
  container?: { image: string; auth?: ImageAuthSpec | undefined };
  role?: 'execution' | 'build' | 'init';
  /** Label sets carrying any of these labels may not serve the job. */
  excludeLabels?: string[];
}
