/**
 * A queue list with jobs put back in their places: whatever mix of appends, placements (one or a
 * batch, enough of them to fold the side map in) and removals, it reads as the sorted list of the
 * jobs it holds, and every job is found by id.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { QueuedJob } from '../../../src/dispatch/job-queue.js';
import { SeqMap } from '../../../src/dispatch/seq-map.js';

const job = (seq: number): QueuedJob => ({
  id: `j-${seq}`,
  runId: 'r',
  name: 'j',
  seq,
  runsOn: [],
  spec: { role: 'execution' },
  createdAtMs: 0,
});

type Op = { op: 'add'; seqs: number[] } | { op: 'remove'; pick: number };

describe('queue list with placed jobs', () => {
  it('reads in seq order and finds every job it holds', () => {
    const op: fc.Arbitrary<Op> = fc.oneof(
      fc.record({
        op: fc.constant('add' as const),
        seqs: fc.array(fc.integer({ min: 0, max: 5000 }), { maxLength: 700 }),
      }),
      fc.record({ op: fc.constant('remove' as const), pick: fc.nat() }),
    );
    fc.assert(
      fc.property(fc.array(op, { maxLength: 12 }), (ops) => {
        const m = new SeqMap();
        const model = new Map<number, QueuedJob>();
        for (const o of ops) {
          if (o.op === 'remove') {
            const held = [...model.keys()];
            if (!held.length) continue;
            const seq = held[o.pick % held.length]!;
            expect(m.delete(`j-${seq}`)).toBe(true);
            model.delete(seq);
            continue;
          }
          const late: QueuedJob[] = [];
          for (const seq of new Set(o.seqs)) {
            if (model.has(seq)) continue;
            const j = job(seq);
            model.set(seq, j);
            if (m.last && m.last.seq > seq) late.push(j);
            else m.append(j);
          }
          // A batch placed together (a re-read), or one by one (requeues).
          if (late.length % 2) m.place(late);
          else for (const j of late) m.place([j]);
        }
        const want = [...model.keys()].sort((a, b) => a - b);
        expect([...m.values()].map((j) => j.seq)).toEqual(want);
        expect(m.size).toBe(want.length);
        for (const seq of want) expect(m.get(`j-${seq}`)?.seq).toBe(seq);
      }),
      { numRuns: 150 },
    );
  });
});
