/**
 * Orchestrator-level settings that shape the scaler: each from its `kici-orchestrator serve` flag,
 * else its environment variable, else its default. A value below its minimum (or not a whole number
 * of milliseconds) is refused with an error naming both the flag and the variable, and the fix. A bad
 * flag is a usage error (the CLI exits 2); a bad variable is a configuration error (exit 1).
 */
import { UsageError, UserError } from '../util/errors.js';

export interface ScalerSettings {
  scalerSpawnTimeoutMs: number;
  scalerPendingSweepIntervalMs: number;
  scalerReapIntervalMs: number;
  scalerReapStrandedTimeoutMs: number;
  scalerReapReattemptIntervalMs: number;
  scalerClaimRetentionMs: number;
  scalerProvisionBackoffBaseMs: number;
  scalerProvisionBackoffMaxMs: number;
  scalerProvisionMaxConsecutiveFailures: number;
  rerouteFlapGraceMs: number;
  clusterPeerStaleTimeoutMs: number;
  agentTokenTtlMs: number;
}

export interface SettingSpec {
  key: keyof ScalerSettings;
  env: string;
  /** The serve flag, without its leading dashes. */
  flag: string;
  defaultValue: number;
  min: number;
  /** What the number counts, for messages. */
  unit: 'milliseconds' | 'failures';
  describe: string;
}

const ms = (
  key: keyof ScalerSettings,
  env: string,
  flag: string,
  defaultValue: number,
  min: number,
  describe: string,
): SettingSpec => ({ key, env, flag, defaultValue, min, unit: 'milliseconds', describe });

export const SCALER_SETTINGS: readonly SettingSpec[] = [
  ms(
    'scalerSpawnTimeoutMs',
    'KICI_SCALER_SPAWN_TIMEOUT_MS',
    'scaler-spawn-timeout-ms',
    300_000,
    1000,
    'how long a spawned agent has to register',
  ),
  ms(
    'scalerPendingSweepIntervalMs',
    'KICI_SCALER_PENDING_SWEEP_INTERVAL_MS',
    'scaler-pending-sweep-interval-ms',
    10_000,
    1000,
    'how often waiting jobs are offered to the scaler again',
  ),
  ms(
    'scalerReapIntervalMs',
    'KICI_SCALER_REAP_INTERVAL_MS',
    'scaler-reap-interval-ms',
    60_000,
    5000,
    'how often the event provision reaper runs',
  ),
  ms(
    'scalerReapStrandedTimeoutMs',
    'KICI_SCALER_REAP_STRANDED_TIMEOUT_MS',
    'scaler-reap-stranded-timeout-ms',
    1_800_000,
    60_000,
    'how long an event agent may go unseen while its holder lives before it is reaped',
  ),
  ms(
    'scalerReapReattemptIntervalMs',
    'KICI_SCALER_REAP_REATTEMPT_INTERVAL_MS',
    'scaler-reap-reattempt-interval-ms',
    600_000,
    60_000,
    'how long before a failed teardown is tried again',
  ),
  ms(
    'scalerClaimRetentionMs',
    'KICI_SCALER_CLAIM_RETENTION_MS',
    'scaler-claim-retention-ms',
    3_600_000,
    0,
    'how long used or expired claim codes are kept',
  ),
  ms(
    'scalerProvisionBackoffBaseMs',
    'KICI_SCALER_PROVISION_BACKOFF_BASE_MS',
    'scaler-provision-backoff-base-ms',
    30_000,
    1000,
    'first deferral after a failed provision',
  ),
  ms(
    'scalerProvisionBackoffMaxMs',
    'KICI_SCALER_PROVISION_BACKOFF_MAX_MS',
    'scaler-provision-backoff-max-ms',
    900_000,
    1000,
    'longest deferral after failed provisions',
  ),
  {
    key: 'scalerProvisionMaxConsecutiveFailures',
    env: 'KICI_SCALER_PROVISION_MAX_CONSECUTIVE_FAILURES',
    flag: 'scaler-provision-max-consecutive-failures',
    defaultValue: 5,
    min: 1,
    unit: 'failures',
    describe: 'failures in a row after which a scaler counts as failing consistently',
  },
  ms(
    'rerouteFlapGraceMs',
    'KICI_REROUTE_FLAP_GRACE_MS',
    'reroute-flap-grace-ms',
    120_000,
    1000,
    'least time an event provision must go unseen before the reaper may condemn it',
  ),
  ms(
    'clusterPeerStaleTimeoutMs',
    'KICI_CLUSTER_PEER_STALE_TIMEOUT_MS',
    'cluster-peer-stale-timeout-ms',
    60_000,
    1000,
    "a silent peer's grace; the reaper waits at least twice this",
  ),
  ms(
    'agentTokenTtlMs',
    'KICI_AGENT_TOKEN_TTL_MS',
    'agent-token-ttl-ms',
    3_600_000,
    1000,
    "lifetime of a spawned agent's token (kept that far ahead while its agent is held)",
  ),
];

/** Flag values as commander hands them over (camelCased flag names). */
export type SettingFlags = Partial<Record<string, string | undefined>>;

export function flagProperty(flag: string): string {
  return flag.replace(/-([a-z])/g, (_m, c: string) => c.toUpperCase());
}

function parse(spec: SettingSpec, raw: string, from: 'flag' | 'env'): number {
  const n = Number(raw.trim());
  if (raw.trim() === '' || !Number.isSafeInteger(n) || n < spec.min)
    throw new (from === 'flag' ? UsageError : UserError)(
      `${from === 'flag' ? `--${spec.flag}` : spec.env}: expected whole ${spec.unit} of at least ${spec.min}, got "${raw}". ` +
        `Set --${spec.flag} or ${spec.env} to ${spec.min} or more, or leave both unset for the default (${spec.defaultValue}).`,
    );
  return n;
}

/** Every setting: flag, else environment, else default; the first bad value throws (see the file comment). */
export function readScalerSettings(
  env: NodeJS.ProcessEnv = process.env,
  flags: SettingFlags = {},
): ScalerSettings {
  const out = {} as ScalerSettings;
  const fromFlag = new Set<keyof ScalerSettings>();
  for (const spec of SCALER_SETTINGS) {
    const flag = flags[flagProperty(spec.flag)];
    const fromEnv = env[spec.env];
    if (flag !== undefined) fromFlag.add(spec.key);
    out[spec.key] =
      flag !== undefined
        ? parse(spec, flag, 'flag')
        : fromEnv !== undefined && fromEnv !== ''
          ? parse(spec, fromEnv, 'env')
          : spec.defaultValue;
  }
  if (out.scalerProvisionBackoffMaxMs < out.scalerProvisionBackoffBaseMs) {
    // Blame the command line when it set either side of the pair.
    const usage = fromFlag.has('scalerProvisionBackoffMaxMs') || fromFlag.has('scalerProvisionBackoffBaseMs');
    throw new (usage ? UsageError : UserError)(
      `--scaler-provision-backoff-max-ms / KICI_SCALER_PROVISION_BACKOFF_MAX_MS (${out.scalerProvisionBackoffMaxMs}) is below the backoff base (${out.scalerProvisionBackoffBaseMs}); raise the maximum or lower the base.`,
    );
  }
  return out;
}

/**
 * The URL agents dial when a scaler entry does not set one: `--orchestrator-url`, else
 * KICI_ORCHESTRATOR_URL, else undefined (the server's own /ws). Agents only speak WebSocket, so
 * anything but a ws:// or wss:// URL is refused here rather than by every agent later.
 */
export function orchestratorUrlFrom(flag: string | undefined, env: string | undefined): string | undefined {
  const [raw, from] = flag !== undefined ? [flag, 'flag'] : [env || undefined, 'env'];
  if (raw === undefined) return undefined;
  let ok = false;
  try {
    ok = ['ws:', 'wss:'].includes(new URL(raw).protocol);
  } catch {
    // Not a URL at all: refused below.
  }
  if (!ok)
    throw new (from === 'flag' ? UsageError : UserError)(
      `${from === 'flag' ? '--orchestrator-url' : 'KICI_ORCHESTRATOR_URL'}: expected a ws:// or wss:// URL, got "${raw}". ` +
        "Set --orchestrator-url or KICI_ORCHESTRATOR_URL to the address agents dial (for example ws://10.0.0.5:8080/ws), or leave both unset for this server's own.",
    );
  return raw;
}
