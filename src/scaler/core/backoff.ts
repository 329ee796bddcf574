/**
 * Provision backoff (spec C.9, narrowed by our issue to scaler + label set): consecutive failed
 * launches of one label set of one scaler defer further launches from 30 s doubling to 900 s;
 * any success resets it. Pure state: time is always passed in, nothing here schedules work.
 */

export interface ProvisionBackoffOptions {
  baseMs?: number;
  maxMs?: number;
  /** From this many consecutive failures on, the state is reported as failing consistently. */
  maxConsecutiveFailures?: number;
}

export const DEFAULT_PROVISION_BACKOFF = {
  baseMs: 30_000,
  maxMs: 900_000,
  maxConsecutiveFailures: 5,
} as const satisfies Required<ProvisionBackoffOptions>;

/** How many dead-provision agent ids are remembered per key for de-duplication. */
export const COUNTED_AGENTS_CAP = 64;

export interface BackoffError {
  kind: string;
  message: string;
}

export interface BackoffState {
  consecutive: number;
  deferUntilMs: number;
  delayMs: number;
  failingConsistently: boolean;
  /** False when this report was a duplicate (agent already counted) and changed nothing. */
  counted: boolean;
}

export type BackoffCheck =
  | { blocked: false }
  | { blocked: true; retryAfterMs: number; consecutive: number; lastError?: BackoffError; reason: string };

export interface BackoffSnapshotEntry {
  key: string;
  scalerName: string;
  labelSetKey: string;
  consecutive: number;
  deferUntilMs: number;
  lastError?: BackoffError;
}

interface Entry {
  consecutive: number;
  deferUntilMs: number;
  delayMs: number;
  lastError?: BackoffError;
}

/**
 * Key for one label set of one scaler: `${scalerName}|${labelSetKey}`. A `|` or `\` inside the
 * scaler name is backslash-escaped so the key can always be split back apart for messages.
 */
export function backoffKey(scalerName: string, labelSetKey: string): string {
  return `${scalerName.replace(/[\\|]/g, (c) => `\\${c}`)}|${labelSetKey}`;
}

/** Inverse of `backoffKey`. A key without a separator is taken as a bare scaler name. */
export function parseBackoffKey(key: string): { scalerName: string; labelSetKey: string } {
  let name = '';
  for (let i = 0; i < key.length; i++) {
    const c = key[i];
    if (c === '\\' && i + 1 < key.length) {
      name += key[++i];
    } else if (c === '|') {
      return { scalerName: name, labelSetKey: key.slice(i + 1) };
    } else {
      name += c;
    }
  }
  return { scalerName: name, labelSetKey: '' };
}

export class ProvisionBackoff {
  readonly baseMs: number;
  readonly maxMs: number;
  readonly maxConsecutiveFailures: number;
  private readonly states = new Map<string, Entry>();
  /**
   * Agent ids already counted, per key, oldest first. Kept apart from the state on purpose: a
   * success clears the backoff but not this memory, so a late second report of an old dead
   * provision (local prune and leader reaper both see it) cannot re-arm a recovered label set.
   */
  private readonly counted = new Map<string, Set<string>>();

  constructor(opts: ProvisionBackoffOptions = {}) {
    this.baseMs = opts.baseMs ?? DEFAULT_PROVISION_BACKOFF.baseMs;
    this.maxMs = opts.maxMs ?? DEFAULT_PROVISION_BACKOFF.maxMs;
    this.maxConsecutiveFailures =
      opts.maxConsecutiveFailures ?? DEFAULT_PROVISION_BACKOFF.maxConsecutiveFailures;
    if (!(Number.isFinite(this.baseMs) && this.baseMs > 0)) {
      throw new RangeError(`provision backoff base must be a positive number of ms, got ${this.baseMs}`);
    }
    if (!(Number.isFinite(this.maxMs) && this.maxMs >= this.baseMs)) {
      throw new RangeError(`provision backoff max (${this.maxMs} ms) must be >= base (${this.baseMs} ms)`);
    }
    if (!(Number.isInteger(this.maxConsecutiveFailures) && this.maxConsecutiveFailures >= 1)) {
      throw new RangeError(
        `maxConsecutiveFailures must be an integer >= 1, got ${this.maxConsecutiveFailures}`,
      );
    }
  }

  /** Deferral after the n-th consecutive failure: base × 2^(n−1), capped at max. */
  delayFor(consecutive: number): number {
    if (consecutive <= 0) return 0;
    // 2 ** large is Infinity, which the min() turns into max.
    return Math.min(this.baseMs * 2 ** (consecutive - 1), this.maxMs);
  }

  /**
   * Count one failed launch. With an `agentId`, a provision reported dead twice is counted once.
   */
  recordFailure(key: string, nowMs: number, agentId?: string, classified?: BackoffError): BackoffState {
    if (agentId !== undefined && !this.remember(key, agentId)) {
      return { ...this.view(this.states.get(key)), counted: false };
    }
    const prev = this.states.get(key);
    const consecutive = (prev?.consecutive ?? 0) + 1;
    const delayMs = this.delayFor(consecutive);
    const next: Entry = { consecutive, delayMs, deferUntilMs: nowMs + delayMs };
    const lastError = classified ?? prev?.lastError;
    if (lastError) next.lastError = { kind: lastError.kind, message: lastError.message };
    this.states.set(key, next);
    return { ...this.view(next), counted: true };
  }

  /** A launch of this key registered: clear the backoff. True when there was one to clear. */
  recordSuccess(key: string): boolean {
    return this.states.delete(key);
  }

  check(key: string, nowMs: number): BackoffCheck {
    const s = this.states.get(key);
    if (!s || s.consecutive <= 0 || nowMs >= s.deferUntilMs) return { blocked: false };
    const retryAfterMs = s.deferUntilMs - nowMs;
    const result: BackoffCheck = {
      blocked: true,
      retryAfterMs,
      consecutive: s.consecutive,
      reason: this.reason(key, s, retryAfterMs),
    };
    if (s.lastError) result.lastError = { ...s.lastError };
    return result;
  }

  snapshot(): BackoffSnapshotEntry[] {
    return [...this.states].map(([key, s]) => {
      const entry: BackoffSnapshotEntry = {
        key,
        ...parseBackoffKey(key),
        consecutive: s.consecutive,
        deferUntilMs: s.deferUntilMs,
      };
      if (s.lastError) entry.lastError = { ...s.lastError };
      return entry;
    });
  }

  /** Forget everything about keys whose scaler is gone (reload removed it). */
  forgetScaler(scalerName: string): void {
    for (const map of [this.states, this.counted]) {
      for (const key of map.keys()) if (parseBackoffKey(key).scalerName === scalerName) map.delete(key);
    }
  }

  private reason(key: string, s: Entry, retryAfterMs: number): string {
    const { scalerName, labelSetKey } = parseBackoffKey(key);
    const times = s.consecutive > 1 ? ` ${s.consecutive} times in a row` : '';
    const last = s.lastError ? ` (last: ${s.lastError.kind}: ${s.lastError.message})` : '';
    const secs = Math.ceil(retryAfterMs / 1000);
    const hint =
      s.consecutive >= this.maxConsecutiveFailures
        ? `; \`kici-admin diagnose\` shows the cause on the scaler:${scalerName} row`
        : '';
    return `scaler "${scalerName}" label set [${labelSetKey}] failed to start an agent${times}${last}; retrying in ${secs}s${hint}`;
  }

  /** Returns false when the id was already counted for this key. */
  private remember(key: string, agentId: string): boolean {
    let ids = this.counted.get(key);
    if (!ids) {
      ids = new Set();
      this.counted.set(key, ids);
    }
    if (ids.has(agentId)) return false;
    ids.add(agentId);
    // Sets iterate in insertion order, so the first entry is the oldest.
    if (ids.size > COUNTED_AGENTS_CAP) ids.delete(ids.values().next().value as string);
    return true;
  }

  private view(s: Entry | undefined): Omit<BackoffState, 'counted'> {
    if (!s) return { consecutive: 0, deferUntilMs: 0, delayMs: 0, failingConsistently: false };
    return {
      consecutive: s.consecutive,
      deferUntilMs: s.deferUntilMs,
      delayMs: s.delayMs,
      failingConsistently: s.consecutive >= this.maxConsecutiveFailures,
    };
  }
}
