/**
 * A queued job's waiting reason is kept per queue group and worked out when read, so a dispatch pass
 * writes once per group instead of once per job. For random sequences of adds, removes, re-adds,
 * reasons given to one job and reasons given to a whole group (sparing some jobs, as jobs being
 * provisioned are spared), every job must read the reason the old eager rule would have written:
 * each write sets the reason of the jobs it names, and a job keeps its last one.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { JobQueue, type QueuedJob } from '../../../src/dispatch/job-queue.js';

const LABEL_SETS = [['linux'], ['linux', 'gpu'], ['mac']];
const JOBS = 8;

const opArb = fc.oneof(
  fc.record({
    op: fc.constant('add' as const),
    job: fc.nat(JOBS - 1),
    brings: fc.option(fc.string({ maxLength: 3 })),
  }),
  fc.record({ op: fc.constant('remove' as const), job: fc.nat(JOBS - 1) }),
  fc.record({ op: fc.constant('own' as const), job: fc.nat(JOBS - 1), text: fc.string({ maxLength: 3 }) }),
  fc.record({
    op: fc.constant('group' as const),
    set: fc.nat(LABEL_SETS.length - 1),
    text: fc.string({ maxLength: 3 }),
    keep: fc.subarray([...Array(JOBS).keys()]),
  }),
);

const jobArb = fc.record({
  set: fc.nat(LABEL_SETS.length - 1),
  priority: fc.constantFrom(0, 1),
  owner: fc.constantFrom('a', 'b'),
});

describe('lazy waiting reasons', () => {
  it('read as the eager per-job writes would have left them', () => {
    fc.assert(
      fc.property(
        fc.array(jobArb, { minLength: JOBS, maxLength: JOBS }),
        fc.array(opArb, { maxLength: 60 }),
        (defs, ops) => {
          const queue = new JobQueue();
          const objects = new Map<number, QueuedJob>();
          const eager = new Map<number, string | undefined>();
          const queued = new Set<number>();
          const make = (i: number): QueuedJob => ({
            id: `j${i}`,
            runId: 'r',
            name: `job ${i}`,
            seq: i,
            runsOn: [...LABEL_SETS[defs[i]!.set]!],
            spec: { role: 'execution' },
            createdAtMs: 0,
            priority: defs[i]!.priority,
            owner: defs[i]!.owner,
          });
          for (const o of ops) {
            if (o.op === 'add' && !queued.has(o.job)) {
              const job = objects.get(o.job) ?? make(o.job);
              objects.set(o.job, job);
              if (o.brings !== null) {
                job.waiting = o.brings; // as a requeue says why before the job goes back
                eager.set(o.job, o.brings);
              }
              queue.add(job);
              queued.add(o.job);
            } else if (o.op === 'remove' && queued.has(o.job)) {
              expect(queue.remove(`j${o.job}`)).toBe(objects.get(o.job));
              queued.delete(o.job);
            } else if (o.op === 'own' && objects.has(o.job)) {
              objects.get(o.job)!.waiting = o.text;
              eager.set(o.job, o.text);
            } else if (o.op === 'group') {
              const key = JSON.stringify([LABEL_SETS[o.set], 'execution', '', [], null]);
              const group = queue.orderedGroups().find((g) => g.key === key);
              if (!group) continue;
              const keep = new Set(o.keep.map((i) => `j${i}`));
              // The old rule: every job of the group not spared is written.
              for (const job of group.jobs())
                if (!keep.has(job.id)) eager.set(Number(job.id.slice(1)), o.text);
              queue.setGroupReason(group, o.text, keep);
            }
            for (const [i, job] of objects) {
              expect(job.waiting).toBe(eager.get(i));
              if (queued.has(i)) expect(queue.get(`j${i}`)?.waiting).toBe(eager.get(i));
              else expect(queue.get(`j${i}`)).toBeUndefined();
            }
          }
        },
      ),
      { numRuns: 300 },
    );
  });

  it('a group reason costs no write per job: a job added after it shows its own', () => {
    const queue = new JobQueue();
    const job = (id: string, seq: number): QueuedJob => ({
      id,
      runId: 'r',
      name: id,
      seq,
      runsOn: ['linux'],
      spec: { role: 'execution' },
      createdAtMs: 0,
    });
    queue.add(job('a', 0));
    const [group] = queue.orderedGroups();
    queue.setGroupReason(group!, 'waiting for a matching agent');
    queue.add(job('b', 1));
    expect(queue.get('a')?.waiting).toBe('waiting for a matching agent');
    expect(queue.get('b')?.waiting).toBeUndefined();
    expect({ ...queue.get('a') }).toMatchObject({ id: 'a', waiting: 'waiting for a matching agent' });
  });
});
