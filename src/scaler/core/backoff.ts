/**
 * Provision backoff, per scaler and label set: failed launches that will fail the same way again
 * (deterministic ones) defer further launches of that label set of that scaler from 30 s doubling
 * to 900 s. A transient failure is counted but does not defer: the next launch is retried at once,
 * until the streak reaches `maxConsecutiveFailures` (the retry budget), after which every failure
 * defers too. Any success resets it. Pure state: time is always passed in, nothing here schedules
 * work.
 */
import type {
  BackoffCheck,
  BackoffError,
  BackoffLift,
  BackoffLiftCause,
  BackoffSnapshotEntry,
  BackoffState,
  BackoffStreak,
} from './backoff-types.js';

export interface ProvisionBackoffOptions {
  baseMs?: number;
  maxMs?: number;
  /**
   * From this many consecutive failures on, the state is reported as failing consistently, and
   * transient failures defer like deterministic ones.
   */
  maxConsecutiveFailures?: number;
}

export const DEFAULT_PROVISION_BACKOFF = {
  baseMs: 30_000,
  maxMs: 900_000,
  maxConsecutiveFailures: 5,
} as const satisfies Required<ProvisionBackoffOptions>;

/** How many dead-provision agent ids are remembered per key for de-duplication. */
export const COUNTED_AGENTS_CAP = 64;

interface Entry {
  /** Failures in a row, of any class. */
  consecutive: number;
  /** How many of them deferred launches: the delay doubles per deferral, not per failure. */
  deferrals: number;
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
  private readonly fixedBaseMs: number;
  private readonly fixedMaxMs: number;
  private readonly fixedMaxConsecutive: number;
  private live: (() => Required<ProvisionBackoffOptions>) | undefined;
  private readonly states = new Map<string, Entry>();
  /**
   * Agent ids already counted, per key, oldest first. Kept apart from the state on purpose: a
   * success clears the backoff but not this memory, so a late second report of an old dead
   * provision (local prune and leader reaper both see it) cannot re-arm a recovered label set.
   */
  private readonly counted = new Map<string, Set<string>>();
  /** Per key, the last lift (operator or reload): a lift is news until the next one replaces it. */
  private readonly lifts = new Map<string, BackoffLift>();

  /** Take the timing from `source` on each use from now on: values changed while running (cluster settings), judged where they are set. */
  follow(source: () => Required<ProvisionBackoffOptions>): void {
    this.live = source;
  }

  get baseMs(): number {
    return this.live?.().baseMs ?? this.fixedBaseMs;
  }

  get maxMs(): number {
    return this.live?.().maxMs ?? this.fixedMaxMs;
  }

  get maxConsecutiveFailures(): number {
    return this.live?.().maxConsecutiveFailures ?? this.fixedMaxConsecutive;
  }

  constructor(opts: ProvisionBackoffOptions = {}) {
    this.fixedBaseMs = opts.baseMs ?? DEFAULT_PROVISION_BACKOFF.baseMs;
    this.fixedMaxMs = opts.maxMs ?? DEFAULT_PROVISION_BACKOFF.maxMs;
    this.fixedMaxConsecutive =
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
   * `transient` failures defer nothing until the streak has used up the retry budget; `neverArm`
   * ones are counted and shown but never defer (a warm-pool spawn that merely failed to start).
   */
  recordFailure(
    key: string,
    nowMs: number,
    agentId?: string,
    classified?: BackoffError,
    opts: { transient?: boolean; neverArm?: boolean } = {},
  ): BackoffState {
    if (agentId !== undefined && !this.remember(key, agentId)) {
      return { ...this.view(this.states.get(key)), counted: false, armed: false, becameConsistent: false };
    }
    const prev = this.states.get(key);
    const consecutive = (prev?.consecutive ?? 0) + 1;
    const armed = !opts.neverArm && (!opts.transient || consecutive >= this.maxConsecutiveFailures);
    const deferrals = (prev?.deferrals ?? 0) + (armed ? 1 : 0);
    const delayMs = armed ? this.delayFor(deferrals) : 0;
    const next: Entry = {
      consecutive,
      deferrals,
      delayMs,
      // A transient failure leaves an earlier deferral as it was (it may still be running).
      deferUntilMs: armed ? nowMs + delayMs : (prev?.deferUntilMs ?? 0),
    };
    const lastError = classified ?? prev?.lastError;
    if (lastError) next.lastError = { kind: lastError.kind, message: lastError.message };
    this.states.set(key, next);
    return {
      ...this.view(next),
      counted: true,
      armed,
      becameConsistent: consecutive === this.maxConsecutiveFailures,
    };
  }

  /** The failure streak of a key that may not be blocking (undefined when there is none). */
  streak(key: string): BackoffStreak | undefined {
    const s = this.states.get(key);
    if (!s) return undefined;
    return s.lastError
      ? { consecutive: s.consecutive, lastError: { ...s.lastError } }
      : { consecutive: s.consecutive };
  }

  /** A launch of this key registered: clear the backoff. True when there was one to clear. */
  recordSuccess(key: string): boolean {
    return this.states.delete(key);
  }

  check(key: string, nowMs: number): BackoffCheck {
    const s = this.states.get(key);
    if (!s || s.deferrals <= 0 || nowMs >= s.deferUntilMs) return { blocked: false };
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

  /**
   * Lift the backoff of one scaler's label sets (all of them, or the one given): the operator fixed
   * the cause. The memory of counted agents stays, so a late report of an old failure cannot re-arm
   * it. Returns the label set keys that had a backoff.
   */
  clear(scalerName: string, labelSetKey?: string, lift?: BackoffLiftCause): string[] {
    const cleared: string[] = [];
    for (const [key, state] of [...this.states]) {
      const k = parseBackoffKey(key);
      if (k.scalerName !== scalerName || (labelSetKey !== undefined && k.labelSetKey !== labelSetKey))
        continue;
      this.states.delete(key);
      cleared.push(k.labelSetKey);
      if (lift) this.lifts.set(key, { ...k, ...lift, consecutive: state.consecutive });
    }
    return cleared;
  }

  /** The last lift of each label set, oldest first. */
  liftHistory(): BackoffLift[] {
    return [...this.lifts.values()].sort((x, y) => x.atMs - y.atMs);
  }

  /** Forget everything about keys whose scaler is gone (reload removed it). */
  forgetScaler(scalerName: string): void {
    for (const map of [this.states, this.counted, this.lifts]) {
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

  private view(s: Entry | undefined): Omit<BackoffState, 'counted' | 'armed' | 'becameConsistent'> {
    if (!s) return { consecutive: 0, deferUntilMs: 0, delayMs: 0, failingConsistently: false };
    return {
      consecutive: s.consecutive,
      deferUntilMs: s.deferUntilMs,
      delayMs: s.delayMs,
      failingConsistently: s.consecutive >= this.maxConsecutiveFailures,
    };
  }
}
