import { readScalerSettings, type ScalerSettings } from '../config/scaler-settings.js';
import { DEFAULT_CLAIM_RETENTION_MS, DEFAULT_REAP_WINDOWS } from '../scaler/event-reaper.js';
import type { BackendDeps } from '../scaler/backends/deps.js';
import type { ProvisionBackoffOptions } from '../scaler/core/backoff.js';
import type { WebhookRetryPolicy } from '../scaler/events/webhook.js';
import type { ReapWindows } from '../scaler/reap-decide.js';
import type { AgentIsolation } from '../net/isolation.js';
import type { Clock } from '../util/clock.js';
import { UserError } from '../util/errors.js';
import type { Logger } from '../util/logger.js';
import type { OpenedDatabase } from '../store/index.js';
import type { ClaimStore } from './claim-store.js';
import type { TlsFiles } from './tls.js';
import type { RetentionPolicy } from '../store/retention/policy.js';

/** How an orchestrator is started: the CLI's flags, and what tests and embedders inject. */
export interface OrchestratorOptions {
  host?: string;
  port?: number;
  dataDir?: string;
  /** The bootstrap admin token's file (outside the data dir); default from defaultAdminTokenFile(). */
  adminTokenFile?: string | undefined;
  /** Serve HTTPS and WSS with these PEM files (re-read by reloadTls); plain HTTP is then not served. */
  tls?: TlsFiles | undefined;
  /** `/metrics` answers without a token. */
  metricsPublic?: boolean | undefined;
  databaseUrl?: string | undefined;
  /**
   * A store already opened and migrated, used in place of the one `databaseUrl` or `dataDir` names
   * (tests hand in an in-memory one to skip initdb). The orchestrator owns it from here and closes
   * it on stop; `dataDir` still holds the lock, the admin token and the instance id.
   */
  database?: OpenedDatabase | undefined;
  scalerConfigPath?: string | undefined;
  /** Host drivers for backends (VMM, nft isolation, disk probe); tests and embedders pass their own. */
  backendDeps?: Partial<Pick<BackendDeps, 'vmm' | 'isolationFor' | 'vmStatfs' | 'vmDiskThresholdBytes'>>;
  /** The start-up disk guard's probe, threshold and failure backoff (defaults: statfs, 1 GiB, 30 s). */
  startupDiskGuard?: { statfs?: BackendDeps['vmStatfs']; thresholdBytes?: number; backoffMs?: number };
  scalerConfigDir?: string | undefined;
  /** Where machine pools keep their cross-process ledger (default: chosen by resolveLedgerDir). */
  machineLedgerDir?: string | undefined;
  logger?: Logger;
  clock?: Clock;
  /** URL agents dial when a scaler entry does not set one (default: this server's /ws). */
  agentUrl?: string | undefined;
  heartbeatIntervalMs?: number;
  /** How long a scaler agent told to leave after its job may stay before it is cut off (default 10 s). */
  agentLeaveGraceMs?: number | undefined;
  spawnTimeoutMs?: number;
  sweepIntervalMs?: number;
  reconnectGraceMs?: number;
  hostEnv?: NodeJS.ProcessEnv;
  /** Redeems agents' claim codes; by default the store's (table scaler_pending_claims). */
  claimStore?: ClaimStore | undefined;
  /** Host firewall for container agents; when absent the composition root builds the default one. */
  isolation?: AgentIsolation | undefined;

  /** Event scalers: webhook retry timing (tests shorten it). */
  webhookRetry?: Partial<WebhookRetryPolicy>;
  /** Event scalers: how often the provision reaper runs (default 30 s). */
  reapIntervalMs?: number;
  /** Event scalers: the reaper's flap grace, stranded timeout and re-attempt throttle. */
  reapWindows?: Partial<Omit<ReapWindows, 'spawnTimeoutMs'>>;
  /** How often the scaler audit refreshes its drift gauge (default 5 min; 0 turns the timer off). */
  scalerAuditIntervalMs?: number;
  /** `--instance-id`; else KICI_INSTANCE_ID, else the id kept in the data dir. */
  instanceId?: string | undefined;
  /** How often this instance heartbeats its row in kici_instances (default 5 s). */
  clusterHeartbeatMs?: number;
  /** What is kept and for how long (default: the settings' env variables, else the defaults). */
  retention?: RetentionPolicy;
  /** Below this many free bytes on the data dir new work waits (default: KICI_DATA_MIN_FREE_MB, else 256 MiB). */
  dataMinFreeBytes?: number;
  /** Lifetime of the token minted for each spawned agent (default 1 hour). */
  agentTokenTtlMs?: number;
  /** Provision backoff after failed spawns (defaults: 30 s base, 15 min max, 5 in a row). */
  provisionBackoff?: ProvisionBackoffOptions;
  /** Event scalers: how long used or expired claim codes are kept before the reaper purges them. */
  claimRetentionMs?: number;
  /**
   * The serve command's scaler settings (flags and environment, already checked). They fill the
   * options above that were not given explicitly.
   */
  scalerSettings?: ScalerSettings;
}

/** Explicit options win; the serve command's settings fill the rest. */
export function withScalerSettings(opts: OrchestratorOptions): OrchestratorOptions {
  const s = opts.scalerSettings;
  if (!s) return opts;
  return {
    ...opts,
    spawnTimeoutMs: opts.spawnTimeoutMs ?? s.scalerSpawnTimeoutMs,
    sweepIntervalMs: opts.sweepIntervalMs ?? s.scalerPendingSweepIntervalMs,
    reapIntervalMs: opts.reapIntervalMs ?? s.scalerReapIntervalMs,
    reapWindows: {
      // A provision must be missed for longer than a peer takes to count as gone, twice over.
      flapGraceMs: Math.max(s.rerouteFlapGraceMs, 2 * s.clusterPeerStaleTimeoutMs),
      strandedTimeoutMs: s.scalerReapStrandedTimeoutMs,
      reattemptIntervalMs: s.scalerReapReattemptIntervalMs,
      ...opts.reapWindows,
    },
    agentTokenTtlMs: opts.agentTokenTtlMs ?? s.agentTokenTtlMs,
    provisionBackoff: opts.provisionBackoff ?? {
      baseMs: s.scalerProvisionBackoffBaseMs,
      maxMs: s.scalerProvisionBackoffMaxMs,
      maxConsecutiveFailures: s.scalerProvisionMaxConsecutiveFailures,
    },
    claimRetentionMs: opts.claimRetentionMs ?? s.scalerClaimRetentionMs,
  };
}

/**
 * The settings this instance runs with before any cluster-wide value: the serve settings, with the
 * options given explicitly (tests, embedders) in their place. The cluster settings override these.
 */
export function instanceSettings(opts: OrchestratorOptions): ScalerSettings {
  const s = opts.scalerSettings ?? readScalerSettings({});
  const w = opts.reapWindows;
  const b = opts.provisionBackoff;
  return {
    ...s,
    scalerReapIntervalMs: opts.reapIntervalMs ?? (opts.scalerSettings ? s.scalerReapIntervalMs : 30_000),
    scalerReapStrandedTimeoutMs: w?.strandedTimeoutMs ?? DEFAULT_REAP_WINDOWS.strandedTimeoutMs,
    scalerReapReattemptIntervalMs: w?.reattemptIntervalMs ?? DEFAULT_REAP_WINDOWS.reattemptIntervalMs,
    rerouteFlapGraceMs: w?.flapGraceMs ?? DEFAULT_REAP_WINDOWS.flapGraceMs,
    scalerClaimRetentionMs: opts.claimRetentionMs ?? DEFAULT_CLAIM_RETENTION_MS,
    agentTokenTtlMs: opts.agentTokenTtlMs ?? s.agentTokenTtlMs,
    scalerProvisionBackoffBaseMs: b?.baseMs ?? s.scalerProvisionBackoffBaseMs,
    scalerProvisionBackoffMaxMs: b?.maxMs ?? s.scalerProvisionBackoffMaxMs,
    scalerProvisionMaxConsecutiveFailures:
      b?.maxConsecutiveFailures ?? s.scalerProvisionMaxConsecutiveFailures,
  };
}

/** Option, else KICI_CLUSTER_HEARTBEAT_MS, else 5 s. */
export function clusterHeartbeatMs(opts: OrchestratorOptions): number {
  return opts.clusterHeartbeatMs ?? envMillis('KICI_CLUSTER_HEARTBEAT_MS', 5_000, 100, 600_000);
}

/**
 * Option, else KICI_AGENT_HEARTBEAT_MS, else 10 s: how often agents are told to heartbeat. An agent
 * silent for three of these is dropped, so a shorter one finds a dead agent sooner for more traffic.
 */
export function agentHeartbeatMs(opts: OrchestratorOptions): number {
  return opts.heartbeatIntervalMs ?? envMillis('KICI_AGENT_HEARTBEAT_MS', 10_000, 100, 600_000);
}

/** KICI_CLUSTER_LOCK_TIMEOUT_MS (default 2 s): the lease's connect and query budget. */
export function clusterLockTimeoutMs(): number {
  return envMillis('KICI_CLUSTER_LOCK_TIMEOUT_MS', 2_000, 100, 60_000);
}

/** Whole milliseconds from `name`, within [min, max]; `fallback` when unset or empty. */
function envMillis(name: string, fallback: number, min: number, max: number): number {
  const raw = process.env[name];
  if (!raw) return fallback;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < min || n > max)
    throw new UserError(`${name}: expected milliseconds from ${min} to ${max}, got "${raw}"`);
  return n;
}
