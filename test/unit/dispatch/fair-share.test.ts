import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { NO_LOAD, pickNext, type FairJob, type OwnerLoad } from '../../../src/dispatch/fair-share.js';
import { JobQueue, type QueuedJob } from '../../../src/dispatch/job-queue.js';

const OWNERS = ['', 'a', 'b', 'c'];

function queued(j: FairJob): QueuedJob {
  return {
    id: j.id,
    runId: 'r1',
    name: j.id,
    seq: j.seq,
    runsOn: ['linux'],
    spec: { role: 'execution' },
    createdAtMs: j.seq,
    priority: j.priority,
    owner: j.owner,
  };
}

/** A queue of jobs with distinct seqs, a few priorities and owners, in any insertion order. */
const jobsArb = fc
  .array(fc.record({ priority: fc.integer({ min: -2, max: 2 }), owner: fc.constantFrom(...OWNERS) }), {
    maxLength: 40,
  })
  .chain((raw) =>
    fc
      .shuffledSubarray(
        raw.map((r, i) => ({ ...r, id: `j${i}`, seq: i + 1 })),
        { minLength: raw.length, maxLength: raw.length },
      )
      .map((jobs) => jobs as FairJob[]),
  );

/** Jobs already running per owner (each a start, in order). */
const runningArb = fc.array(fc.constantFrom(...OWNERS), { maxLength: 10 });

/** The reference rule applied one pick at a time, each pick counted as a start. */
function referenceOrder(jobs: FairJob[], starts: string[]): string[] {
  const loads = new Map<string, OwnerLoad>();
  let tick = 0;
  const start = (o: string) => {
    const l = loads.get(o) ?? NO_LOAD;
    loads.set(o, { running: l.running + 1, lastStart: ++tick });
  };
  for (const o of starts) start(o);
  const left = [...jobs];
  const out: string[] = [];
  for (
    let j = pickNext(left, (o) => loads.get(o) ?? NO_LOAD);
    j;
    j = pickNext(left, (o) => loads.get(o) ?? NO_LOAD)
  ) {
    out.push(j.id);
    left.splice(left.indexOf(j), 1);
    start(j.owner);
  }
  return out;
}

function queueWith(jobs: FairJob[], starts: string[]): JobQueue {
  const q = new JobQueue();
  for (const o of starts) q.noteStarted(queued({ id: `run-${o}`, seq: 0, priority: 0, owner: o }));
  for (const j of jobs) q.add(queued(j));
  return q;
}

const orderOf = (q: JobQueue) => q.orderedGroups().flatMap((g) => [...g.jobs()].map((j) => j.id));

describe('fair share: the reference rule', () => {
  it('picks a job of the highest queued priority, of an owner with the fewest running', () => {
    fc.assert(
      fc.property(jobsArb, runningArb, (jobs, starts) => {
        const loads = new Map<string, OwnerLoad>();
        starts.forEach((o, i) => {
          const l = loads.get(o) ?? NO_LOAD;
          loads.set(o, { running: l.running + 1, lastStart: i + 1 });
        });
        const load = (o: string) => loads.get(o) ?? NO_LOAD;
        const chosen = pickNext(jobs, load);
        if (!jobs.length) {
          expect(chosen).toBeUndefined();
          return;
        }
        const top = Math.max(...jobs.map((j) => j.priority));
        expect(chosen!.priority).toBe(top);
        const eligible = jobs.filter((j) => j.priority === top);
        expect(load(chosen!.owner).running).toBe(Math.min(...eligible.map((j) => load(j.owner).running)));
        // FIFO within the owner.
        const mine = eligible.filter((j) => j.owner === chosen!.owner);
        expect(chosen!.seq).toBe(Math.min(...mine.map((j) => j.seq)));
      }),
    );
  });

  it('never starves: every owner with queued work is served within a bounded number of picks', () => {
    fc.assert(
      fc.property(
        fc.array(fc.integer({ min: 0, max: 5 }), { minLength: 2, maxLength: 4 }),
        fc.integer({ min: 1, max: 60 }),
        (initialRunning, picks) => {
          // Each owner has plenty queued (one burst each), all at one priority, nothing finishes.
          const owners = initialRunning.map((_, i) => `o${i}`);
          const starts = owners.flatMap((o, i) => Array<string>(initialRunning[i]!).fill(o));
          const jobs: FairJob[] = [];
          let seq = 1;
          for (const o of owners)
            for (let k = 0; k < 100; k++) jobs.push({ id: `${o}-${k}`, seq: seq++, priority: 0, owner: o });
          const order = referenceOrder(jobs, starts).slice(0, picks * owners.length);
          const spread = Math.max(...initialRunning) - Math.min(...initialRunning);
          const bound = owners.length * (spread + 1);
          // Every owner appears in every window of `bound` consecutive picks.
          for (let i = 0; i + bound <= order.length; i++) {
            const window = new Set(order.slice(i, i + bound).map((id) => id.split('-')[0]));
            expect(window.size).toBe(owners.length);
          }
        },
      ),
    );
  });
});

describe('fair share: the queue', () => {
  it('hands jobs out in the order of the reference rule, for any queue and running set', () => {
    fc.assert(
      fc.property(jobsArb, runningArb, (jobs, starts) => {
        expect(orderOf(queueWith(jobs, starts))).toEqual(referenceOrder(jobs, starts));
      }),
    );
  });

  it('keeps the rule as jobs are removed, started and ended', () => {
    fc.assert(
      fc.property(jobsArb, runningArb, fc.array(fc.nat(), { maxLength: 10 }), (jobs, starts, takes) => {
        const q = queueWith(jobs, starts);
        const started = [...starts];
        for (const t of takes) {
          const order = orderOf(q);
          if (!order.length) break;
          const id = order[t % order.length]!;
          const job = q.remove(id)!;
          if (t % 3 === 0) {
            q.noteStarted(job);
            started.push(job.owner ?? '');
          }
        }
        const left = jobs.filter((j) => q.has(j.id));
        expect(orderOf(q)).toEqual(referenceOrder(left, started));
      }),
    );
  });

  it('orders label sets by their highest priority, then by their oldest job', () => {
    const q = new JobQueue();
    q.add({ ...queued({ id: 'old', seq: 1, priority: 0, owner: '' }), runsOn: ['mac'] });
    q.add(queued({ id: 'urgent', seq: 2, priority: 5, owner: '' }));
    expect(q.orderedGroups().map((g) => g.first.id)).toEqual(['urgent', 'old']);
  });

  it('a job that ends gives its owner back its share', () => {
    const q = new JobQueue();
    const a1 = queued({ id: 'a1', seq: 1, priority: 0, owner: 'a' });
    q.noteStarted(a1);
    q.add(queued({ id: 'a2', seq: 2, priority: 0, owner: 'a' }));
    q.add(queued({ id: 'b1', seq: 3, priority: 0, owner: 'b' }));
    expect(q.orderedGroups()[0]!.first.id).toBe('b1');
    q.noteEnded(a1);
    // Both have none running now; a started more recently than b (never), so b still goes first.
    expect(q.orderedGroups()[0]!.first.id).toBe('b1');
    expect(q.runningFor(a1)).toBe(0);
  });
});
