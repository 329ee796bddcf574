import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { SpawnTimeoutError, withDeadline } from '../../../src/scaler/core/deadline.js';
import { ManualClock } from '../../../src/util/clock.js';

const flush = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/** A promise plus its controls, for backends that settle when the test says so. */
function deferred<T>(): { promise: Promise<T>; resolve: (v: T) => void; reject: (e: unknown) => void } {
  let resolve!: (v: T) => void;
  let reject!: (e: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

describe('withDeadline', () => {
  let unhandled: unknown[];
  const onUnhandled = (reason: unknown): void => {
    unhandled.push(reason);
  };
  beforeEach(() => {
    unhandled = [];
    process.on('unhandledRejection', onUnhandled);
  });
  afterEach(() => {
    process.off('unhandledRejection', onUnhandled);
  });

  it('rejects with SpawnTimeoutError exactly at the deadline and aborts the signal', async () => {
    const clock = new ManualClock();
    let seen: AbortSignal | undefined;
    const result = withDeadline(1_000, clock, (signal) => {
      seen = signal;
      return new Promise<string>(() => {}); // a backend that never settles
    });
    let outcome: unknown;
    result.catch((e: unknown) => (outcome = e));
    clock.advance(999);
    await flush();
    expect(outcome).toBeUndefined();
    expect(seen?.aborted).toBe(false);
    clock.advance(1);
    await flush();
    expect(outcome).toBeInstanceOf(SpawnTimeoutError);
    expect((outcome as Error).message).toBe('scaler spawn timed out after 1000ms');
    expect(seen?.aborted).toBe(true);
    expect(seen?.reason).toBe(outcome);
  });

  it('swallows a late rejection and a late resolution of the backend', async () => {
    const clock = new ManualClock();
    const late = deferred<string>();
    const result = withDeadline(50, clock, () => late.promise);
    clock.advance(50);
    await expect(result).rejects.toBeInstanceOf(SpawnTimeoutError);
    late.reject(new Error('backend gave up after the deadline'));
    await flush();
    await flush();
    expect(unhandled).toEqual([]);

    const late2 = deferred<string>();
    const result2 = withDeadline(50, clock, () => late2.promise);
    clock.advance(50);
    await expect(result2).rejects.toBeInstanceOf(SpawnTimeoutError);
    late2.resolve('too late');
    await flush();
    expect(unhandled).toEqual([]);
  });

  it('resolves with the result and cancels the timer on normal completion', async () => {
    const clock = new ManualClock();
    let signal: AbortSignal | undefined;
    const result = withDeadline(10_000, clock, async (s) => {
      signal = s;
      return 'agent-1';
    });
    await expect(result).resolves.toBe('agent-1');
    expect(clock.pendingTimers()).toBe(0);
    clock.advance(20_000);
    expect(signal?.aborted).toBe(false);
  });

  it('passes a backend failure through and cancels the timer', async () => {
    const clock = new ManualClock();
    await expect(withDeadline(1_000, clock, () => Promise.reject(new Error('ENOENT')))).rejects.toThrow(
      'ENOENT',
    );
    expect(clock.pendingTimers()).toBe(0);
    await expect(
      withDeadline(1_000, clock, () => {
        throw new Error('threw synchronously');
      }),
    ).rejects.toThrow('threw synchronously');
    expect(clock.pendingTimers()).toBe(0);
  });

  it('forwards a parent abort to the backend and rejects with its reason', async () => {
    const clock = new ManualClock();
    const parent = new AbortController();
    let signal: AbortSignal | undefined;
    const result = withDeadline(
      1_000,
      clock,
      (s) => {
        signal = s;
        return new Promise<void>(() => {});
      },
      parent.signal,
    );
    const reason = new Error('shutting down');
    parent.abort(reason);
    await expect(result).rejects.toBe(reason);
    expect(signal?.aborted).toBe(true);
    expect(clock.pendingTimers()).toBe(0);
  });

  it('does not start the backend when the parent is already aborted', async () => {
    const parent = new AbortController();
    parent.abort(new Error('gone'));
    let called = false;
    await expect(
      withDeadline(
        1_000,
        new ManualClock(),
        async () => {
          called = true;
        },
        parent.signal,
      ),
    ).rejects.toThrow('gone');
    expect(called).toBe(false);
  });

  it('refuses a negative deadline', async () => {
    await expect(withDeadline(-1, new ManualClock(), async () => 1)).rejects.toBeInstanceOf(RangeError);
  });
});
