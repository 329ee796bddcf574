import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { MAX_TIMER_MS, setLongTimeout } from '../../../src/util/long-timer.js';

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
