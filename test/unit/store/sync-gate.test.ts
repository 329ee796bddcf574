/**
 * The embedded database's syncs, some held back until their caller has sent the job they gate
 * (src/store/sync-gate.ts): a model of files written, synced, held and closed, and the gate's
 * failure, which must not let later writes pass as durable.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { SyncGate } from '../../../src/store/sync-gate.js';

type Op =
  | { kind: 'sync'; fd: number }
  | { kind: 'held'; fd: number }
  | { kind: 'close'; fd: number }
  | { kind: 'flush' };

const fd = fc.integer({ min: 3, max: 6 });
const op: fc.Arbitrary<Op> = fc.oneof(
  fd.map((f) => ({ kind: 'sync' as const, fd: f })),
  fd.map((f) => ({ kind: 'held' as const, fd: f })),
  fd.map((f) => ({ kind: 'close' as const, fd: f })),
  fc.constant({ kind: 'flush' as const }),
);

describe('SyncGate', () => {
  it('a sync asked for outside a hold happens at once; a held one by the flush, or before its file closes', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(op, { maxLength: 40 }), async (ops) => {
        const synced: number[] = [];
        const record = (f: number) => void synced.push(f);
        const gate = new SyncGate(record, async (f) => record(f));
        // The files whose last asked-for sync has not happened yet (the model).
        const owed = new Set<number>();
        for (const o of ops) {
          const before = synced.length;
          if (o.kind === 'sync') {
            gate.onSync(o.fd);
            expect(synced.slice(before)).toEqual([o.fd]);
            owed.delete(o.fd);
          } else if (o.kind === 'held') {
            await gate.holdDuring(async () => gate.onSync(o.fd));
            expect(synced.length).toBe(before);
            owed.add(o.fd);
          } else if (o.kind === 'close') {
            gate.onClose(o.fd);
            // Synced while the number is still the file's, once, and only if something was owed.
            expect(synced.slice(before)).toEqual(owed.has(o.fd) ? [o.fd] : []);
            owed.delete(o.fd);
          } else {
            await gate.flush();
            expect(new Set(synced.slice(before))).toEqual(owed);
            expect(synced.length - before).toBe(owed.size);
            owed.clear();
          }
          expect(gate.pending).toBe(owed.size);
        }
      }),
    );
  });

  it('holds only during the call: a sync after it returned (or threw) happens at once', async () => {
    const synced: number[] = [];
    const gate = new SyncGate(
      (f) => void synced.push(f),
      () => Promise.reject(new Error('nothing is flushed here')),
    );
    await expect(
      gate.holdDuring(async () => {
        gate.onSync(3);
        throw new Error('the write failed');
      }),
    ).rejects.toThrow('the write failed');
    gate.onSync(4);
    expect(synced).toEqual([4]);
    expect(gate.pending).toBe(1);
  });

  it('a failed sync fails the flush, and every sync after it, even once the disk answers again', async () => {
    let broken = true;
    const synced: number[] = [];
    const sync = (f: number) => {
      if (broken) throw Object.assign(new Error('EIO: i/o error, fdatasync'), { code: 'EIO' });
      synced.push(f);
    };
    const gate = new SyncGate(sync, async (f) => sync(f));
    await gate.holdDuring(async () => gate.onSync(3));
    await expect(gate.flush()).rejects.toThrow(/EIO/);
    broken = false;
    // The page cache may have dropped what the failed sync was for: nothing written since can be
    // called durable, so the database is stopped at its next sync rather than carry on.
    expect(() => gate.onSync(3)).toThrow(/EIO/);
    await expect(gate.flush()).rejects.toThrow(/EIO/);
    expect(synced).toEqual([]);
  });

  it('a flush waits for a sync another flush started, which may be the one that covers its write', async () => {
    const started: { fd: number; done: () => void }[] = [];
    const gate = new SyncGate(
      () => {},
      (fd) => new Promise<void>((ok) => started.push({ fd, done: ok })),
    );
    // Two writers hold their syncs on the same file; the first flush takes both holds.
    await gate.holdDuring(async () => gate.onSync(3));
    await gate.holdDuring(async () => gate.onSync(3));
    let first = false;
    let second = false;
    void gate.flush().then(() => (first = true));
    void gate.flush().then(() => (second = true));
    await Promise.resolve();
    expect(started.map((s) => s.fd)).toEqual([3]);
    await new Promise((r) => setImmediate(r));
    expect([first, second]).toEqual([false, false]);
    started[0]!.done();
    await new Promise((r) => setImmediate(r));
    expect([first, second]).toEqual([true, true]);
  });

  it('a file closed while its sync runs off the main thread is synced before it closes; the late error is not a failure', async () => {
    const onMain: number[] = [];
    let finish!: (err?: Error) => void;
    const gate = new SyncGate(
      (fd) => void onMain.push(fd),
      () => new Promise<void>((ok, fail) => (finish = (err) => (err ? fail(err) : ok()))),
    );
    await gate.holdDuring(async () => gate.onSync(5));
    const flushed = gate.flush();
    gate.onClose(5);
    expect(onMain).toEqual([5]);
    // The number was closed under the running sync (and may name another file now).
    finish(Object.assign(new Error('EBADF: bad file descriptor, fdatasync'), { code: 'EBADF' }));
    await expect(flushed).resolves.toBeUndefined();
    gate.onSync(5);
    expect(onMain).toEqual([5, 5]);
  });

  it('an off-thread sync that fails for a file still open fails the flush', async () => {
    const gate = new SyncGate(
      () => {},
      () => Promise.reject(Object.assign(new Error('EIO: i/o error, fdatasync'), { code: 'EIO' })),
    );
    await gate.holdDuring(async () => gate.onSync(4));
    await expect(gate.flush()).rejects.toThrow(/EIO/);
    expect(() => gate.onSync(4)).toThrow(/EIO/);
  });
});
