import type { Clock, TimerHandle } from './clock.js';

/**
 * Node clamps a timer delay above 2^31-1 ms (about 24.8 days) to 1 ms, so a long timeout would fire
 * at once. These timers sleep in chunks below that limit and check the wall clock on each wake-up.
 */

/** The largest delay Node's setTimeout honours. */
export const MAX_TIMER_MS = 2 ** 31 - 1;

export interface LongTimer {
  clear(): void;
}

export interface LongTimerOptions {
  /** Do not keep the process alive for this timer. */
  unref?: boolean;
  /** Longest single sleep; tests lower it to exercise the chunking. */
  chunkMs?: number;
  now?: () => number;
  /**
   * Called with every underlying timer as it is armed, for callers that keep a plain handle and
   * cancel it with clearTimeout (clearing the current chunk ends the chain).
   */
  onArm?: (handle: NodeJS.Timeout) => void;
}

/** Like setTimeout, for any delay. A non-finite delay never fires; a negative one fires at once. */
export function setLongTimeout(fn: () => void, ms: number, opts: LongTimerOptions = {}): LongTimer {
  const now = opts.now ?? Date.now;
  const chunk = Math.min(opts.chunkMs ?? MAX_TIMER_MS, MAX_TIMER_MS);
  let handle: NodeJS.Timeout | undefined;
  let cleared = false;
  if (!Number.isFinite(ms)) return { clear: () => {} };
  const due = now() + Math.max(0, ms);
  const arm = () => {
    if (cleared) return;
    const left = due - now();
    if (left <= 0) {
      handle = undefined;
      fn();
      return;
    }
    handle = setTimeout(arm, Math.min(left, chunk));
    if (opts.unref) handle.unref();
    opts.onArm?.(handle);
  };
  // The first sleep is armed directly so that a short timer behaves exactly like setTimeout.
  handle = setTimeout(arm, Math.min(Math.max(0, ms), chunk));
  if (opts.unref) handle.unref();
  opts.onArm?.(handle);
  return {
    clear() {
      cleared = true;
      if (handle) clearTimeout(handle);
      handle = undefined;
    },
  };
}

/**
 * `setLongTimeout` on an injected Clock, so tests drive it by hand: sleeps in chunks no longer than
 * `chunkMs` and checks the clock on each wake-up. A non-finite delay never fires.
 */
export function setLongTimer(clock: Clock, ms: number, fn: () => void, chunkMs = MAX_TIMER_MS): TimerHandle {
  if (!Number.isFinite(ms)) return { cancel: () => {} };
  const chunk = Math.max(1, Math.min(chunkMs, MAX_TIMER_MS));
  const due = clock.now() + Math.max(0, ms);
  let handle: TimerHandle | undefined;
  let cancelled = false;
  const arm = (wait: number): void => {
    handle = clock.setTimer(Math.min(wait, chunk), () => {
      if (cancelled) return;
      const left = due - clock.now();
      if (left > 0) arm(left);
      else fn();
    });
  };
  arm(Math.max(0, ms));
  return {
    cancel() {
      cancelled = true;
      handle?.cancel();
    },
  };
}
