/**
 * Live-tunable cluster settings: a subset of the serve settings that an admin may change for every
 * orchestrator on one database at once, without a restart. Each is stored under its snake_case
 * name; a setting with no stored value falls back to the instance's own flag, variable or default.
 * A stored value overrides the flag and the variable (it is the later, cluster-wide decision).
 * Values are judged with the same minimums as the serve settings.
 */
import { SCALER_SETTINGS, type ScalerSettings, type SettingSpec } from './scaler-settings.js';

export const CLUSTER_SETTING_KEYS = [
  'scaler_reap_interval_ms',
  'scaler_reap_stranded_timeout_ms',
  'scaler_reap_reattempt_interval_ms',
  'scaler_claim_retention_ms',
  'scaler_provision_backoff_base_ms',
  'scaler_provision_backoff_max_ms',
  'scaler_provision_max_consecutive_failures',
  'agent_token_ttl_ms',
  'reroute_flap_grace_ms',
] as const;

export type ClusterSettingKey = (typeof CLUSTER_SETTING_KEYS)[number];

/** Stored values; a key that is absent falls back to the instance's own setting. */
export type ClusterOverrides = Partial<Record<ClusterSettingKey, number>>;

/** What a change asks for: a number sets the key, null clears it (back to the instance's own). */
export type ClusterChanges = Partial<Record<ClusterSettingKey, number | null>>;

/** The serve setting a cluster key stands for: same flag name with underscores. */
export function specOf(key: ClusterSettingKey): SettingSpec {
  const spec = SCALER_SETTINGS.find((s) => s.flag === key.replace(/_/g, '-'));
  if (!spec) throw new Error(`no serve setting for cluster setting ${key}`);
  return spec;
}

/** `scaler_reap_interval_ms` or `scaler-reap-interval-ms` (either case) → the key, else undefined. */
export function clusterKeyOf(name: string): ClusterSettingKey | undefined {
  const k = name.trim().toLowerCase().replace(/-/g, '_');
  return (CLUSTER_SETTING_KEYS as readonly string[]).includes(k) ? (k as ClusterSettingKey) : undefined;
}

export type Parsed<T> = { ok: true; value: T } | { ok: false; problem: string };

/** A value as typed: a whole number at or above the setting's minimum, or `default` to clear it. */
export function parseClusterValue(key: ClusterSettingKey, raw: string): Parsed<number | null> {
  const spec = specOf(key);
  const text = raw.trim();
  if (text.toLowerCase() === 'default') return { ok: true, value: null };
  const n = Number(text);
  if (text === '' || !/^\d+$/.test(text) || !Number.isSafeInteger(n) || n < spec.min)
    return {
      ok: false,
      problem: `${key}: expected whole ${spec.unit} of at least ${spec.min} (or "default" to clear it), got "${raw}"`,
    };
  return { ok: true, value: n };
}

/** The inverse of parseClusterValue. */
export function formatClusterValue(value: number | null): string {
  return value === null ? 'default' : String(value);
}

/** A stored override applied over the instance's own settings. */
export function applyOverrides(base: ScalerSettings, overrides: ClusterOverrides): ScalerSettings {
  const out = { ...base };
  for (const key of CLUSTER_SETTING_KEYS) {
    const v = overrides[key];
    if (v !== undefined) out[specOf(key).key] = v;
  }
  return out;
}

/**
 * Judge a change as the API receives it (JSON): every key known, every value a whole number at or
 * above its minimum or null, and the backoff maximum not below the base once applied over `current`.
 * Problems name the field.
 */
export function judgeChanges(
  body: unknown,
  current: ClusterOverrides,
  base: ScalerSettings,
): { ok: true; changes: ClusterChanges } | { ok: false; problems: string[] } {
  if (typeof body !== 'object' || body === null || Array.isArray(body))
    return { ok: false, problems: ['values: expected an object of setting names to numbers or null'] };
  const problems: string[] = [];
  const changes: ClusterChanges = {};
  const entries = Object.entries(body);
  if (!entries.length) problems.push('values: name at least one setting');
  for (const [name, value] of entries) {
    const key = clusterKeyOf(name);
    if (!key) {
      problems.push(`${name}: not a cluster setting (known: ${CLUSTER_SETTING_KEYS.join(', ')})`);
      continue;
    }
    if (value === null) {
      changes[key] = null;
      continue;
    }
    const parsed = typeof value === 'number' ? parseClusterValue(key, String(value)) : undefined;
    if (!parsed || !parsed.ok || parsed.value === null)
      problems.push(
        parsed && !parsed.ok
          ? parsed.problem
          : `${key}: expected whole ${specOf(key).unit} of at least ${specOf(key).min}, or null`,
      );
    else changes[key] = parsed.value;
  }
  if (problems.length) return { ok: false, problems };
  const next = applyOverrides(base, mergeChanges(current, changes));
  if (next.scalerProvisionBackoffMaxMs < next.scalerProvisionBackoffBaseMs)
    return {
      ok: false,
      problems: [
        `scaler_provision_backoff_max_ms: ${next.scalerProvisionBackoffMaxMs} would be below the backoff base (${next.scalerProvisionBackoffBaseMs}); raise the maximum or lower the base`,
      ],
    };
  return { ok: true, changes };
}

/** Overrides after a change: null entries removed, numbers set. */
export function mergeChanges(current: ClusterOverrides, changes: ClusterChanges): ClusterOverrides {
  const out: ClusterOverrides = { ...current };
  for (const [k, v] of Object.entries(changes) as [ClusterSettingKey, number | null][]) {
    if (v === null) delete out[k];
    else out[k] = v;
  }
  return out;
}
