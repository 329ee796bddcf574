/**
 * The queue's change count stands in for its full picture (every job's id and reason) on a live
 * page: whatever sequence of adds, removes and reasons, the picture never changes while the count
 * stays put. And a batch added at once keeps the order of adding its jobs one by one.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { JobQueue, type QueuedJob } from '../../../src/dispatch/job-queue.js';

const LABELS = [['linux'], ['linux', 'gpu']];
const REASONS = ['waiting for a matching agent', 'at capacity', undefined];

function job(n: number): QueuedJob {
  return {
    id: `j-${n}`,
    runId: 'r-1',
    name: `j${n}`,
    seq: n,
    runsOn: [...LABELS[n % 2]!],
    spec: { role: 'execution' },
    createdAtMs: 0,
  };
}

const picture = (q: JobQueue) =>
  q
    .all()
    .map((j) => `${j.id}:${j.waiting ?? ''}`)
    .sort()
    .join('|');

type Op =
  | { op: 'add'; n: number; reason?: string | undefined }
  | { op: 'remove'; n: number }
  | { op: 'own'; n: number; reason: string | undefined }
  | { op: 'group'; g: number; reason: string; keep: number[] };

const n = fc.integer({ min: 0, max: 9 });
const reason = fc.constantFrom(...REASONS);
const op: fc.Arbitrary<Op> = fc.oneof(
  fc.record({ op: fc.constant('add' as const), n, reason }),
  fc.record({ op: fc.constant('remove' as const), n }),
  fc.record({ op: fc.constant('own' as const), n, reason }),
  fc.record({
    op: fc.constant('group' as const),
    g: fc.integer({ min: 0, max: 1 }),
    reason: fc.constantFrom(...(REASONS.filter(Boolean) as string[])),
    keep: fc.array(n, { maxLength: 3 }),
  }),
);

describe('queue change count', () => {
  it('moves whenever the picture of the queue changes', () => {
    fc.assert(
      fc.property(fc.array(op, { maxLength: 60 }), (ops) => {
        const q = new JobQueue();
        for (const o of ops) {
          const before = picture(q);
          const count = q.changes;
          if (o.op === 'add') q.add({ ...job(o.n), ...(o.reason ? { waiting: o.reason } : {}) });
          else if (o.op === 'remove') q.remove(`j-${o.n}`);
          else if (o.op === 'own') {
            const j = q.get(`j-${o.n}`);
            if (j) j.waiting = o.reason;
          } else {
            const g = q.orderedGroups().find((x) => x.labels.length === LABELS[o.g]!.length);
            if (g)
              q.setGroupReason(
                g,
                o.reason,
                o.keep.map((k) => `j-${k}`),
              );
          }
          if (picture(q) !== before) expect(q.changes).not.toBe(count);
        }
      }),
      { numRuns: 300 },
    );
  });

  it('a batch added at once sits in the same order as the same jobs added one by one', () => {
    fc.assert(
      fc.property(
        fc.uniqueArray(fc.integer({ min: 0, max: 500 }), { maxLength: 60 }),
        fc.uniqueArray(fc.integer({ min: 0, max: 500 }), { maxLength: 60 }),
        (held, batch) => {
          const one = new JobQueue();
          const many = new JobQueue();
          for (const n of held) {
            one.add(job(n));
            many.add(job(n));
          }
          for (const n of batch) one.add(job(n));
          many.addMany(batch.map(job));
          const order = (q: JobQueue) => q.orderedGroups().map((g) => [...g.jobs()].map((j) => j.seq));
          expect(order(many)).toEqual(order(one));
          for (const seqs of order(many)) expect(seqs).toEqual([...seqs].sort((a, b) => a - b));
        },
      ),
      { numRuns: 300 },
    );
  });
});
