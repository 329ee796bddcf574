/**
 * FIFO counting semaphore that throttles concurrent spawns of one scaler (`maxConcurrentSpawns`).
 *
 * A released slot goes straight to the oldest waiter while the slot is still counted as in use,
 * so an `acquire` that arrives between the release and the waiter's resumption queues behind it
 * instead of jumping ahead.
 */

export type Release = () => void;

interface Waiter {
  grant: (release: Release) => void;
}

export class Semaphore {
  readonly width: number;
  private active = 0;
  private readonly queue: Waiter[] = [];

  constructor(width: number) {
    // NaN or a fractional/low width would stall every spawn; fall back to serial spawning.
    this.width = Number.isNaN(width) ? 1 : Math.max(1, Math.floor(width));
  }

  /** Slots currently held (including ones handed to a waiter that has not resumed yet). */
  get inUse(): number {
    return this.active;
  }

  get waiting(): number {
    return this.queue.length;
  }

  /**
   * Wait for a slot. Resolves to an idempotent release function. If `signal` aborts while
   * waiting, the waiter leaves the queue and the promise rejects with the signal's reason.
   */
  acquire(signal?: AbortSignal): Promise<Release> {
    if (signal?.aborted) return Promise.reject(signal.reason);
    if (this.active < this.width && this.queue.length === 0) {
      this.active += 1;
      return Promise.resolve(this.makeRelease());
    }
    return new Promise<Release>((resolve, reject) => {
      const onAbort = (): void => {
        const i = this.queue.indexOf(waiter);
        if (i >= 0) this.queue.splice(i, 1);
        reject(signal?.reason);
      };
      const waiter: Waiter = {
        grant: (release) => {
          signal?.removeEventListener('abort', onAbort);
          resolve(release);
        },
      };
      this.queue.push(waiter);
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }

  private makeRelease(): Release {
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const next = this.queue.shift();
      // Hand the slot over without decrementing: the count never dips, so nobody can jump in.
      if (next) next.grant(this.makeRelease());
      else this.active -= 1;
    };
  }
}

/** Run `fn` while holding a slot; the slot is released however `fn` ends. */
export async function withSlot<T>(
  sem: Semaphore,
  fn: () => Promise<T> | T,
  signal?: AbortSignal,
): Promise<T> {
  const release = await sem.acquire(signal);
  try {
    return await fn();
  } finally {
    release();
  }
}
