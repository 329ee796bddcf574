/**
 * Time as a port. The decision core never reads the wall clock itself, so tests can drive
 * every deadline, backoff and idle timer with a manual clock.
 */
export interface TimerHandle {
  cancel(): void;
}

export interface Clock {
  /** Wall-clock time (ms since the epoch): for stamps people and the store read. It may jump. */
  now(): number;
  /**
   * A clock that never jumps (ms from an arbitrary origin): for every "how long since" that decides
   * liveness, so a wall-clock step of an hour closes no connection. Absent: `now` stands in.
   */
  monotonic?(): number;
  /** One-shot timer. Real timers are unref'd so a pending timer never keeps the process alive. */
  setTimer(ms: number, fn: () => void): TimerHandle;
}

/**
 * `fn` every `ms` on `clock` until cancelled. The next run is armed before `fn` runs, so a
 * throwing `fn` does not stop the series; on a manual clock, `advance` fires each due run in order.
 * A function for `ms` is asked again for each run, so an interval changed while running applies.
 */
export function every(clock: Clock, ms: number | (() => number), fn: () => void): TimerHandle {
  let current: TimerHandle | undefined;
  let cancelled = false;
  const arm = (): void => {
    current = clock.setTimer(typeof ms === 'number' ? ms : ms(), () => {
      if (cancelled) return;
      arm();
      fn();
    });
  };
  arm();
  return {
    cancel() {
      cancelled = true;
      current?.cancel();
    },
  };
}

/** Elapsed-time reading of `clock`: its monotonic clock when it has one. */
export function monoNow(clock: Clock): number {
  return clock.monotonic ? clock.monotonic() : clock.now();
}

export const systemClock: Clock = {
  now: () => Date.now(),
  monotonic: () => performance.now(),
  setTimer(ms, fn) {
    const t = setTimeout(fn, Math.max(0, ms));
    t.unref();
    return { cancel: () => clearTimeout(t) };
  },
};

/** A clock that only moves when a test advances it. Timers fire in due order. */
export class ManualClock implements Clock {
  private current: number;
  private seq = 0;
  private timers = new Map<number, { due: number; fn: () => void }>();

  constructor(start = 1_700_000_000_000) {
    this.current = start;
  }

  /** How far the wall clock was stepped away from elapsed time (see jumpWall). */
  private wallOffset = 0;

  now(): number {
    return this.current + this.wallOffset;
  }

  monotonic(): number {
    return this.current;
  }

  /** Step the wall clock (an NTP correction, an operator's date -s): elapsed time and timers do not move. */
  jumpWall(ms: number): void {
    this.wallOffset += ms;
  }

  setTimer(ms: number, fn: () => void): TimerHandle {
    const id = ++this.seq;
    this.timers.set(id, { due: this.current + Math.max(0, ms), fn });
    return { cancel: () => this.timers.delete(id) };
  }

  /** Move time forward, firing every timer that falls due on the way, in order. */
  advance(ms: number): void {
    const target = this.current + ms;
    for (;;) {
      let nextId: number | undefined;
      let nextDue = Infinity;
      for (const [id, t] of this.timers) {
        if (t.due <= target && t.due < nextDue) {
          nextDue = t.due;
          nextId = id;
        }
      }
      if (nextId === undefined) break;
      const t = this.timers.get(nextId)!;
      this.timers.delete(nextId);
      this.current = Math.max(this.current, t.due);
      t.fn();
    }
    this.current = target;
  }

  pendingTimers(): number {
    return this.timers.size;
  }
}
