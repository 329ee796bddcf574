/**
 * Time as a port. The decision core never reads the wall clock itself, so tests can drive
 * every deadline, backoff and idle timer with a manual clock.
 */
export interface TimerHandle {
  cancel(): void;
}

export interface Clock {
  now(): number;
  /** One-shot timer. Real timers are unref'd so a pending timer never keeps the process alive. */
  setTimer(ms: number, fn: () => void): TimerHandle;
}

export const systemClock: Clock = {
  now: () => Date.now(),
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

  now(): number {
    return this.current;
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
