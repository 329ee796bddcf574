import type { Clock, TimerHandle } from '../../src/util/clock.js';

/**
 * Real time that a test can move ahead at once. Until `fastForward` it behaves like the system clock (real
 * timers, so a server with real agents runs as usual); `fastForward(ms)` moves both readings forward and
 * fires at once every timer that falls due on the way, in due order, so a test of what happens
 * after a long grace period does not wait the grace out.
 */
export class SkipClock implements Clock {
  private offset = 0;
  private seq = 0;
  private readonly timers = new Map<number, { due: number; fn: () => void; real: NodeJS.Timeout }>();

  now(): number {
    return Date.now() + this.offset;
  }

  monotonic(): number {
    return performance.now() + this.offset;
  }

  setTimer(ms: number, fn: () => void): TimerHandle {
    const id = ++this.seq;
    const due = this.monotonic() + Math.max(0, ms);
    this.arm(id, due, fn);
    return { cancel: () => this.drop(id) };
  }

  /** Move time forward by `ms`: every timer now due fires, earliest first. */
  fastForward(ms: number): void {
    this.offset += ms;
    const due = [...this.timers.entries()]
      .filter(([, t]) => t.due <= this.monotonic())
      .sort(([, a], [, b]) => a.due - b.due);
    for (const [id, t] of due) {
      if (!this.timers.has(id)) continue; // cancelled by an earlier one
      this.drop(id);
      t.fn();
    }
  }

  private arm(id: number, due: number, fn: () => void): void {
    const real = setTimeout(
      () => {
        this.timers.delete(id);
        fn();
      },
      Math.max(0, due - this.monotonic()),
    );
    real.unref();
    this.timers.set(id, { due, fn, real });
  }

  private drop(id: number): void {
    const t = this.timers.get(id);
    if (t) clearTimeout(t.real);
    this.timers.delete(id);
  }
}
