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
        const gate = new SyncGate((f) => void synced.push(f));
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
            gate.flush();
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
    const gate = new SyncGate((f) => void synced.push(f));
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
    const gate = new SyncGate((f) => {
      if (broken) throw Object.assign(new Error('EIO: i/o error, fdatasync'), { code: 'EIO' });
      synced.push(f);
    });
    await gate.holdDuring(async () => gate.onSync(3));
    expect(() => gate.flush()).toThrow(/EIO/);
    broken = false;
    // The page cache may have dropped what the failed sync was for: nothing written since can be
    // called durable, so the database is stopped at its next sync rather than carry on.
    expect(() => gate.onSync(3)).toThrow(/EIO/);
    expect(() => gate.flush()).toThrow(/EIO/);
    expect(() => gate.onClose(3)).toThrow(/EIO/);
    expect(synced).toEqual([]);
  });
});
