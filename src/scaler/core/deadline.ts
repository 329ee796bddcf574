import type { Clock, TimerHandle } from '../../util/clock.js';

/** A spawn exceeded its deadline. The backend's signal was aborted with this same error. */
export class SpawnTimeoutError extends Error {
  override readonly name = 'SpawnTimeoutError';
  readonly timeoutMs: number;

  constructor(timeoutMs: number) {
    super(`scaler spawn timed out after ${timeoutMs}ms`);
    this.timeoutMs = timeoutMs;
  }
}

/**
 * Run `run` with a deadline of `ms` on the injected clock.
 *
 * On expiry the signal handed to `run` is aborted AND the returned promise rejects with
 * `SpawnTimeoutError` at once, without waiting for `run`: a backend stuck in a non-abortable
 * call must not keep the caller's semaphore slot. Whatever `run` settles to later is swallowed.
 * An abort of `parent` (e.g. shutdown) is forwarded the same way, rejecting with its reason.
 * A non-finite `ms` (Infinity) means no deadline. An abort of `disarm` cancels the deadline
 * (the agent registered: it is no longer a spawn that can time out); `run` then simply finishes.
 */
export function withDeadline<T>(
  ms: number,
  clock: Clock,
  run: (signal: AbortSignal) => Promise<T>,
  parent?: AbortSignal,
  disarm?: AbortSignal,
): Promise<T> {
  if (Number.isNaN(ms) || ms < 0) {
    return Promise.reject(new RangeError(`spawn deadline must be >= 0 ms, got ${ms}`));
  }
  if (parent?.aborted) return Promise.reject(parent.reason);

  const controller = new AbortController();
  return new Promise<T>((resolve, reject) => {
    let done = false;
    let timer: TimerHandle | undefined;

    const settle = (finish: () => void): void => {
      if (done) return;
      done = true;
      timer?.cancel();
      parent?.removeEventListener('abort', onParentAbort);
      finish();
    };
    const expire = (error: unknown): void => {
      if (done) return;
      // Abort first so the backend starts tearing down; our rejection does not wait for it.
      controller.abort(error);
      settle(() => reject(error));
    };
    const onParentAbort = (): void => expire(parent?.reason);

    if (Number.isFinite(ms) && !disarm?.aborted)
      timer = clock.setTimer(ms, () => expire(new SpawnTimeoutError(ms)));
    disarm?.addEventListener('abort', () => timer?.cancel(), { once: true });
    parent?.addEventListener('abort', onParentAbort, { once: true });

    let pending: Promise<T>;
    try {
      pending = run(controller.signal);
    } catch (err) {
      // A synchronous throw is an ordinary failure of the attempt.
      settle(() => reject(err));
      return;
    }
    // Always attach both handlers so a late rejection after expiry is never unhandled.
    Promise.resolve(pending).then(
      (value) => settle(() => resolve(value)),
      (err: unknown) => settle(() => reject(err)),
    );
  });
}
