import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { ManualClock } from '../../../src/util/clock.js';
import { MAX_TIMER_MS, setLongTimeout, setLongTimer } from '../../../src/util/long-timer.js';

describe('setLongTimeout', () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('does not fire early for a delay beyond what setTimeout can hold', () => {
    const fn = vi.fn();
    const ms = 30 * 24 * 3600 * 1000; // 30 days, above 2^31-1 ms
    expect(ms).toBeGreaterThan(MAX_TIMER_MS);
    setLongTimeout(fn, ms);
    vi.advanceTimersByTime(1);
    expect(fn).not.toHaveBeenCalled();
    vi.advanceTimersByTime(MAX_TIMER_MS);
    expect(fn).not.toHaveBeenCalled();
    vi.advanceTimersByTime(ms - MAX_TIMER_MS - 2);
    expect(fn).not.toHaveBeenCalled();
    vi.advanceTimersByTime(1);
    expect(fn).toHaveBeenCalledTimes(1);
    vi.advanceTimersByTime(10 * MAX_TIMER_MS);
    expect(fn).toHaveBeenCalledTimes(1);
  });

  it('fires on time across many chunks, and a short delay behaves like setTimeout', () => {
    const long = vi.fn();
    const short = vi.fn();
    setLongTimeout(long, 1_000, { chunkMs: 70 });
    setLongTimeout(short, 5);
    vi.advanceTimersByTime(5);
    expect(short).toHaveBeenCalledTimes(1);
    vi.advanceTimersByTime(994);
    expect(long).not.toHaveBeenCalled();
    vi.advanceTimersByTime(1);
    expect(long).toHaveBeenCalledTimes(1);
  });

  it('clear() stops it in any chunk, and so does clearTimeout on the handle given to onArm', () => {
    const a = vi.fn();
    const timer = setLongTimeout(a, 3 * MAX_TIMER_MS);
    vi.advanceTimersByTime(MAX_TIMER_MS + 10);
    timer.clear();
    vi.advanceTimersByTime(5 * MAX_TIMER_MS);
    expect(a).not.toHaveBeenCalled();

    const b = vi.fn();
    let handle: NodeJS.Timeout | undefined;
    setLongTimeout(b, 3 * MAX_TIMER_MS, { onArm: (h) => (handle = h) });
    vi.advanceTimersByTime(2 * MAX_TIMER_MS);
    clearTimeout(handle);
    vi.advanceTimersByTime(5 * MAX_TIMER_MS);
    expect(b).not.toHaveBeenCalled();
  });

  it('a non-finite delay never fires; a negative one fires at once', () => {
    const never = vi.fn();
    const now = vi.fn();
    setLongTimeout(never, Infinity);
    setLongTimeout(now, -5);
    vi.advanceTimersByTime(0);
    expect(now).toHaveBeenCalledTimes(1);
    vi.advanceTimersByTime(100 * MAX_TIMER_MS);
    expect(never).not.toHaveBeenCalled();
  });
});

describe('setLongTimer (on a Clock)', () => {
  it('sleeps in chunks on the clock and fires exactly at its time', () => {
    const clock = new ManualClock();
    let fired = 0;
    setLongTimer(clock, 1_000, () => fired++, 300);
    clock.advance(999);
    expect(fired).toBe(0);
    // One chunk at a time: never more than one timer pending.
    expect(clock.pendingTimers()).toBe(1);
    clock.advance(1);
    expect(fired).toBe(1);
    expect(clock.pendingTimers()).toBe(0);
  });

  it('cancel stops it between chunks; a non-finite delay never fires', () => {
    const clock = new ManualClock();
    let fired = 0;
    const t = setLongTimer(clock, 1_000, () => fired++, 300);
    clock.advance(400);
    t.cancel();
    clock.advance(10_000);
    expect(fired).toBe(0);
    expect(clock.pendingTimers()).toBe(0);
    setLongTimer(clock, Infinity, () => fired++);
    expect(clock.pendingTimers()).toBe(0);
  });

  it('caps a chunk at what a Node timer can hold', () => {
    const seen: number[] = [];
    const clock = new ManualClock();
    const spy = {
      now: () => clock.now(),
      setTimer: (ms: number, fn: () => void) => (seen.push(ms), clock.setTimer(ms, fn)),
    };
    let fired = 0;
    setLongTimer(spy, 3 * MAX_TIMER_MS, () => fired++);
    clock.advance(3 * MAX_TIMER_MS);
    expect(fired).toBe(1);
    expect(Math.max(...seen)).toBe(MAX_TIMER_MS);
    expect(seen).toHaveLength(3);
  });
});
