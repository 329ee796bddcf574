/**
 * Orchestrator-level settings that shape the scaler: each from its `kici-orchestrator serve` flag,
 * else its environment variable, else its default. A value below its minimum (or not a whole number
 * of milliseconds) is refused with an error naming both the flag and the variable, and the fix.
 */
import { UserError } from '../util/errors.js';

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
    'when an event provision nobody holds counts as stranded',
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
    'how long a rerouted job waits before it may be rerouted again',
  ),
  ms(
    'clusterPeerStaleTimeoutMs',
    'KICI_CLUSTER_PEER_STALE_TIMEOUT_MS',
    'cluster-peer-stale-timeout-ms',
    60_000,
    1000,
    'when a silent peer counts as gone',
  ),
  ms(
    'agentTokenTtlMs',
    'KICI_AGENT_TOKEN_TTL_MS',
    'agent-token-ttl-ms',
    3_600_000,
    1000,
    "lifetime of a spawned agent's token",
  ),
];

/** Flag values as commander hands them over (camelCased flag names). */
export type SettingFlags = Partial<Record<string, string | undefined>>;

export function flagProperty(flag: string): string {
  return flag.replace(/-([a-z])/g, (_m, c: string) => c.toUpperCase());
}

function parse(spec: SettingSpec, raw: string, from: string): number {
  const n = Number(raw.trim());
  if (raw.trim() === '' || !Number.isSafeInteger(n) || n < spec.min)
    throw new UserError(
      `${from}: expected whole ${spec.unit} of at least ${spec.min}, got "${raw}". ` +
        `Set --${spec.flag} or ${spec.env} to ${spec.min} or more, or leave both unset for the default (${spec.defaultValue}).`,
    );
  return n;
}

/** Every setting: flag, else environment, else default; the first bad value throws a UserError. */
export function readScalerSettings(
  env: NodeJS.ProcessEnv = process.env,
  flags: SettingFlags = {},
): ScalerSettings {
  const out = {} as ScalerSettings;
  for (const spec of SCALER_SETTINGS) {
    const flag = flags[flagProperty(spec.flag)];
    const fromEnv = env[spec.env];
    out[spec.key] =
      flag !== undefined
        ? parse(spec, flag, `--${spec.flag}`)
        : fromEnv !== undefined && fromEnv !== ''
          ? parse(spec, fromEnv, spec.env)
          : spec.defaultValue;
  }
  if (out.scalerProvisionBackoffMaxMs < out.scalerProvisionBackoffBaseMs)
    throw new UserError(
      `--scaler-provision-backoff-max-ms / KICI_SCALER_PROVISION_BACKOFF_MAX_MS (${out.scalerProvisionBackoffMaxMs}) is below the backoff base (${out.scalerProvisionBackoffBaseMs}); raise the maximum or lower the base.`,
    );
  return out;
}
