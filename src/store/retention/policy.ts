import { UserError } from '../../util/errors.js';

/**
 * How long each kind of finished record is kept. `null` keeps that kind forever. Live rows (open
 * jobs, unexpired tokens, pending deliveries, spawn rows of running compute) are never pruned,
 * whatever the setting.
 */
export interface RetentionPolicy {
  /** Finished jobs with their steps and logs, counted from when the job finished. */
  jobsMs: number | null;
  /** The "job was pruned" marker left for each pruned job. */
  tombstonesMs: number | null;
  /** Settled scale-event deliveries, reload requests and stopped cluster instances. */
  eventsMs: number | null;
  /** Audit rows. */
  auditMs: number | null;
  /** Agent tokens past their expiry or revocation, and claim codes past their expiry or use. */
  tokensMs: number | null;
  /** Provision outcomes, job correlations of destroyed agents, and agents gone this long. */
  spawnsMs: number | null;
  /** How often the leader prunes. */
  intervalMs: number;
  /** Rows per statement: each batch is its own short transaction. */
  batchRows: number;
}

const DAY = 86_400_000;

export const DEFAULT_RETENTION: RetentionPolicy = {
  jobsMs: 30 * DAY,
  tombstonesMs: 365 * DAY,
  eventsMs: 14 * DAY,
  auditMs: 365 * DAY,
  tokensMs: 7 * DAY,
  spawnsMs: 7 * DAY,
  intervalMs: 10 * 60_000,
  batchRows: 500,
};

/** Each setting's flag (without `--`) and environment variable; the CLI and docs use these names. */
export const RETENTION_SETTINGS = {
  jobsMs: { flag: 'retain-jobs', env: 'KICI_RETAIN_JOBS' },
  tombstonesMs: { flag: 'retain-tombstones', env: 'KICI_RETAIN_TOMBSTONES' },
  eventsMs: { flag: 'retain-events', env: 'KICI_RETAIN_EVENTS' },
  auditMs: { flag: 'retain-audit', env: 'KICI_RETAIN_AUDIT' },
  tokensMs: { flag: 'retain-tokens', env: 'KICI_RETAIN_TOKENS' },
  spawnsMs: { flag: 'retain-spawns', env: 'KICI_RETAIN_SPAWNS' },
  intervalMs: { flag: 'prune-interval', env: 'KICI_PRUNE_INTERVAL' },
} as const;

export type RetentionKey = keyof typeof RETENTION_SETTINGS;

const UNIT_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: DAY, w: 7 * DAY };

/**
 * A duration such as `30d`, `12h`, `90m`, `45s`, `500ms` or `2w`; `off` (or `never`) keeps forever.
 * A bare number is seconds. `name` is the flag or variable named in the error.
 */
export function parseRetention(raw: string, name: string, allowOff = true): number | null {
  const v = raw.trim().toLowerCase();
  if (allowOff && (v === 'off' || v === 'never')) return null;
  const m = /^(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)?$/.exec(v);
  const ms = m ? Number(m[1]) * UNIT_MS[m[2] ?? 's']! : NaN;
  if (!Number.isFinite(ms) || ms < 1 || ms > 100 * 365 * DAY)
    throw new UserError(
      `${name}: expected a duration such as 30d, 12h, 90m or 45s${allowOff ? ', or off' : ''}; got "${raw}"`,
    );
  return Math.round(ms);
}

/** The policy from flags (by key, raw text), else the environment, else the defaults. */
export function retentionFromSettings(
  flags: Partial<Record<RetentionKey, string | undefined>>,
  env: NodeJS.ProcessEnv = process.env,
): RetentionPolicy {
  const policy = { ...DEFAULT_RETENTION };
  for (const key of Object.keys(RETENTION_SETTINGS) as RetentionKey[]) {
    const { flag, env: envName } = RETENTION_SETTINGS[key];
    const fromFlag = flags[key];
    const raw = fromFlag ?? env[envName];
    if (raw === undefined || raw.trim() === '') continue;
    const name = fromFlag !== undefined ? `--${flag}` : envName;
    if (key === 'intervalMs') policy.intervalMs = parseRetention(raw, name, false)!;
    else policy[key] = parseRetention(raw, name);
  }
  return policy;
}

/** For people and `diagnose`: `30d`, `12h`, `45s`, or `off`. */
export function formatRetention(ms: number | null): string {
  if (ms === null) return 'off';
  for (const [unit, size] of [
    ['w', 7 * DAY],
    ['d', DAY],
    ['h', 3_600_000],
    ['m', 60_000],
    ['s', 1000],
  ] as const)
    if (ms >= size && ms % size === 0) return `${ms / size}${unit}`;
  return `${ms}ms`;
}
