import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { Semaphore, withSlot, type Release } from '../../../src/scaler/core/semaphore.js';

/** Let every queued promise callback run. */
const flush = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

describe('Semaphore', () => {
  it('floors the width and never goes below 1', () => {
    expect(new Semaphore(3.9).width).toBe(3);
    expect(new Semaphore(0).width).toBe(1);
    expect(new Semaphore(-5).width).toBe(1);
    expect(new Semaphore(Number.NaN).width).toBe(1);
  });

  it('grants up to width at once and queues the rest', async () => {
    const sem = new Semaphore(2);
    const a = await sem.acquire();
    await sem.acquire();
    let third = false;
    void sem.acquire().then(() => (third = true));
    await flush();
    expect(third).toBe(false);
    expect(sem.inUse).toBe(2);
    expect(sem.waiting).toBe(1);
    a();
    await flush();
    expect(third).toBe(true);
    expect(sem.inUse).toBe(2);
    expect(sem.waiting).toBe(0);
  });

  it('serves waiters in FIFO order', async () => {
    const sem = new Semaphore(1);
    const first = await sem.acquire();
    const order: number[] = [];
    const held: Release[] = [];
    for (const n of [1, 2, 3, 4]) {
      void sem.acquire().then((r) => {
        order.push(n);
        held.push(r);
      });
    }
    first();
    for (let i = 0; i < 4; i++) {
      await flush();
      held.shift()?.();
    }
    await flush();
    expect(order).toEqual([1, 2, 3, 4]);
    expect(sem.inUse).toBe(0);
  });

  it('hands a released slot to the waiter; a later acquire cannot jump the queue', async () => {
    const sem = new Semaphore(1);
    const a = await sem.acquire();
    let bRelease: Release | undefined;
    let cGranted = false;
    void sem.acquire().then((r) => (bRelease = r));
    a();
    // The hand-off is pending (b has not resumed yet); c arrives right now.
    void sem.acquire().then(() => (cGranted = true));
    expect(sem.inUse).toBe(1);
    await flush();
    expect(bRelease).toBeDefined();
    expect(cGranted).toBe(false);
    bRelease!();
    await flush();
    expect(cGranted).toBe(true);
  });

  it('release is idempotent', async () => {
    const sem = new Semaphore(1);
    const r = await sem.acquire();
    r();
    r();
    expect(sem.inUse).toBe(0);
    const again = await sem.acquire();
    r(); // a stale release must not free the new holder's slot
    expect(sem.inUse).toBe(1);
    again();
  });

  it('an aborted waiter leaves the queue and rejects with the reason', async () => {
    const sem = new Semaphore(1);
    const a = await sem.acquire();
    const ctl = new AbortController();
    const waiting = sem.acquire(ctl.signal);
    let lastGranted = false;
    void sem.acquire().then(() => (lastGranted = true));
    expect(sem.waiting).toBe(2);
    const reason = new Error('cancelled');
    ctl.abort(reason);
    await expect(waiting).rejects.toBe(reason);
    expect(sem.waiting).toBe(1);
    a();
    await flush();
    expect(lastGranted).toBe(true);
  });

  it('rejects at once when the signal is already aborted', async () => {
    const sem = new Semaphore(1);
    const ctl = new AbortController();
    ctl.abort(new Error('too late'));
    await expect(sem.acquire(ctl.signal)).rejects.toThrow('too late');
    expect(sem.inUse).toBe(0);
  });

  it('withSlot releases on success and on failure', async () => {
    const sem = new Semaphore(1);
    await expect(withSlot(sem, () => 42)).resolves.toBe(42);
    expect(sem.inUse).toBe(0);
    await expect(
      withSlot(sem, () => {
        throw new Error('boom');
      }),
    ).rejects.toThrow('boom');
    expect(sem.inUse).toBe(0);
  });

  it('property: any interleaving of acquire/release/abort respects width and settles everyone', async () => {
    const op = fc.oneof(
      fc.record({ kind: fc.constant('acquire' as const), abortable: fc.boolean() }),
      fc.record({ kind: fc.constant('release' as const), pick: fc.nat() }),
      fc.record({ kind: fc.constant('abort' as const), pick: fc.nat() }),
    );
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 1, max: 4 }),
        fc.array(op, { maxLength: 60 }),
        async (width, ops) => {
          const sem = new Semaphore(width);
          type Acq = {
            id: number;
            ctl?: AbortController;
            state: 'waiting' | 'held' | 'released' | 'aborted';
          };
          const all: Acq[] = [];
          const releases = new Map<number, Release>();
          const grantOrder: number[] = [];
          const check = (): void => {
            const held = all.filter((a) => a.state === 'held').length;
            expect(held).toBeLessThanOrEqual(width);
            expect(sem.inUse).toBeLessThanOrEqual(width);
          };
          const start = (abortable: boolean): void => {
            const a: Acq = { id: all.length, state: 'waiting' };
            if (abortable) a.ctl = new AbortController();
            all.push(a);
            sem.acquire(a.ctl?.signal).then(
              (r) => {
                a.state = 'held';
                releases.set(a.id, r);
                grantOrder.push(a.id);
              },
              () => (a.state = 'aborted'),
            );
          };
          for (const o of ops) {
            if (o.kind === 'acquire') start(o.abortable);
            else if (o.kind === 'release') {
              const held = all.filter((a) => a.state === 'held');
              const a = held[o.pick % Math.max(1, held.length)];
              if (a) {
                a.state = 'released';
                releases.get(a.id)!();
              }
            } else {
              const waiting = all.filter((a) => a.state === 'waiting' && a.ctl);
              waiting[o.pick % Math.max(1, waiting.length)]?.ctl?.abort(new Error('abort'));
            }
            await flush();
            check();
          }
          // Drain: keep releasing until nobody waits; everyone must end held/released or aborted.
          for (let guard = 0; guard < all.length + 1; guard++) {
            for (const a of all.filter((x) => x.state === 'held')) {
              a.state = 'released';
              releases.get(a.id)!();
            }
            await flush();
            check();
          }
          expect(all.every((a) => a.state === 'released' || a.state === 'aborted')).toBe(true);
          expect(sem.inUse).toBe(0);
          expect(sem.waiting).toBe(0);
          // FIFO: grants happen in acquire order.
          expect(grantOrder).toEqual([...grantOrder].sort((x, y) => x - y));
        },
      ),
      { numRuns: 150 },
    );
  });
});
