import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { JobQueue, type QueuedJob } from '../../../src/dispatch/job-queue.js';
import type { JobSpec } from '../../../src/jobs/run-spec.js';

function job(
  seq: number,
  runsOn: string[] = ['linux'],
  extra: { role?: JobSpec['role']; image?: string; id?: string } = {},
): QueuedJob {
  const spec: JobSpec = { runsOn, steps: [{ run: 'true' }], role: extra.role ?? 'execution' };
  if (extra.image !== undefined) spec.container = { image: extra.image };
  return {
    id: extra.id ?? `j${seq}`,
    runId: 'r1',
    name: `job-${seq}`,
    seq,
    runsOn,
    spec,
    createdAtMs: 1_000 + seq,
  };
}

const seqsOf = (q: JobQueue) => q.orderedGroups().map((g) => [...g.jobs()].map((j) => j.seq));

describe('JobQueue grouping', () => {
  it('groups jobs with the same runsOn, role and image together', () => {
    const q = new JobQueue();
    q.add(job(1, ['linux', 'docker']));
    q.add(job(2, ['linux', 'docker']));
    q.add(job(3, ['linux']));
    expect(seqsOf(q)).toEqual([[1, 2], [3]]);
    expect(q.orderedGroups().map((g) => g.labels)).toEqual([['linux', 'docker'], ['linux']]);
  });

  it('separates jobs that differ only in role', () => {
    const q = new JobQueue();
    q.add(job(1, ['linux']));
    q.add(job(2, ['linux'], { role: 'build' }));
    q.add(job(3, ['linux'], { role: 'init' }));
    q.add(job(4, ['linux'], { role: 'build' }));
    expect(seqsOf(q)).toEqual([[1], [2, 4], [3]]);
  });

  it('separates jobs that differ only in container image, and host jobs from container jobs', () => {
    const q = new JobQueue();
    q.add(job(1, ['linux'], { image: 'node:24' }));
    q.add(job(2, ['linux'], { image: 'python:3' }));
    q.add(job(3, ['linux']));
    q.add(job(4, ['linux'], { image: 'node:24' }));
    expect(seqsOf(q)).toEqual([[1, 4], [2], [3]]);
  });

  it('does not merge a single label containing "," with two separate labels', () => {
    // The run file accepts runsOn: "a,b" as one label; it is not the set {a, b}.
    const q = new JobQueue();
    q.add(job(1, ['a,b']));
    q.add(job(2, ['a', 'b']));
    expect(seqsOf(q)).toEqual([[1], [2]]);
    expect(q.orderedGroups().map((g) => g.labels)).toEqual([['a,b'], ['a', 'b']]);
  });

  it('does not merge groups whose fields run into each other', () => {
    const q = new JobQueue();
    q.add(job(1, ['x|build|'], { role: 'execution' }));
    q.add(job(2, ['x'], { role: 'build', image: '|execution|' }));
    expect(q.orderedGroups()).toHaveLength(2);
  });
});

describe('JobQueue order', () => {
  it('keeps each group in seq order whatever the insertion order', () => {
    const q = new JobQueue();
    for (const s of [5, 2, 9, 1, 7]) q.add(job(s));
    expect(seqsOf(q)).toEqual([[1, 2, 5, 7, 9]]);
  });

  it('orders groups by their oldest job', () => {
    const q = new JobQueue();
    q.add(job(10, ['b']));
    q.add(job(3, ['a']));
    q.add(job(7, ['c']));
    q.add(job(1, ['b']));
    expect(q.orderedGroups().map((g) => g.labels[0])).toEqual(['b', 'a', 'c']);
    q.remove('j1');
    expect(q.orderedGroups().map((g) => g.labels[0])).toEqual(['a', 'c', 'b']);
  });

  it('puts a requeued job back in its place, not at the end', () => {
    const q = new JobQueue();
    for (const s of [1, 2, 3, 4]) q.add(job(s));
    const taken = q.remove('j2')!;
    q.add(job(5));
    q.add(taken);
    expect(seqsOf(q)).toEqual([[1, 2, 3, 4, 5]]);
  });

  it('finishes iterating a group even when a job is requeued into it mid-iteration', () => {
    const q = new JobQueue();
    for (const s of [1, 2, 3, 4]) q.add(job(s));
    const [group] = q.orderedGroups();
    const visited: string[] = [];
    for (const j of group!.jobs()) {
      visited.push(j.id);
      // The dispatcher may hand j1 back (claim failed) while it walks the group.
      if (j.id === 'j2') q.add(q.remove('j1')!);
      if (visited.length > 10) break;
    }
    expect(visited).toEqual(['j1', 'j2', 'j3', 'j4']);
    expect(seqsOf(q)).toEqual([[1, 2, 3, 4]]);
  });

  it('lets a requeued job make its group the oldest again', () => {
    const q = new JobQueue();
    q.add(job(1, ['a']));
    q.add(job(2, ['b']));
    const first = q.remove('j1')!;
    expect(q.orderedGroups().map((g) => g.labels[0])).toEqual(['b']);
    q.add(first);
    expect(q.orderedGroups().map((g) => g.labels[0])).toEqual(['a', 'b']);
  });
});

describe('JobQueue lookups', () => {
  it('tracks has, get, size, all and remove', () => {
    const q = new JobQueue();
    expect(q.size).toBe(0);
    const a = job(1);
    const b = job(2, ['other']);
    q.add(a);
    q.add(b);
    expect(q.size).toBe(2);
    expect(q.has('j1')).toBe(true);
    expect(q.get('j2')).toBe(b);
    expect(
      q
        .all()
        .map((j) => j.id)
        .sort(),
    ).toEqual(['j1', 'j2']);
    expect(q.remove('j1')).toBe(a);
    expect(q.remove('j1')).toBeUndefined();
    expect(q.remove('nope')).toBeUndefined();
    expect(q.has('j1')).toBe(false);
    expect(q.get('j1')).toBeUndefined();
    expect(q.size).toBe(1);
  });

  it('ignores a second add of the same id and keeps the first copy', () => {
    const q = new JobQueue();
    const first = job(1);
    q.add(first);
    q.add({ ...job(1), name: 'impostor', seq: 0 });
    expect(q.size).toBe(1);
    expect(q.get('j1')).toBe(first);
    expect(seqsOf(q)).toEqual([[1]]);
  });

  it('drops a group once its last job is removed', () => {
    const q = new JobQueue();
    q.add(job(1, ['a']));
    q.add(job(2, ['b']));
    q.remove('j1');
    expect(q.orderedGroups().map((g) => g.labels)).toEqual([['b']]);
    q.remove('j2');
    expect(q.orderedGroups()).toEqual([]);
  });
});

describe('JobQueue properties', () => {
  const LABELS = [['linux'], ['linux', 'docker'], ['a,b'], ['a', 'b'], ['gpu']];
  const ROLES = ['execution', 'build', 'init'] as const;
  const IMAGES = [undefined, 'node:24', 'go:1'];

  const opArb = fc.oneof(
    fc.record({
      kind: fc.constant('add' as const),
      id: fc.integer({ min: 0, max: 40 }),
      labels: fc.integer({ min: 0, max: LABELS.length - 1 }),
      role: fc.constantFrom(...ROLES),
      image: fc.constantFrom(...IMAGES),
    }),
    fc.record({ kind: fc.constant('remove' as const), id: fc.integer({ min: 0, max: 40 }) }),
  );

  it('keeps groups sorted, homogeneous and ordered, and size in step with a model', () => {
    fc.assert(
      fc.property(fc.array(opArb, { maxLength: 120 }), (ops) => {
        const q = new JobQueue();
        const model = new Map<string, QueuedJob>();
        // A job's seq is fixed by its id, like a database row: requeues reuse it.
        const seqOf = (id: number) => (id * 7919) % 101;
        for (const op of ops) {
          const id = `j${op.id}`;
          if (op.kind === 'add') {
            const j = job(seqOf(op.id), LABELS[op.labels]!, { role: op.role, image: op.image, id });
            q.add(j);
            if (!model.has(id)) model.set(id, j);
          } else {
            expect(q.remove(id)).toBe(model.get(id));
            model.delete(id);
          }

          expect(q.size).toBe(model.size);
          const groups = q.orderedGroups();
          const seen: string[] = [];
          let previousHead = -Infinity;
          for (const g of groups) {
            const jobs = [...g.jobs()];
            expect(jobs.length).toBeGreaterThan(0);
            expect(g.size).toBe(jobs.length);
            expect(g.first).toBe(jobs[0]);
            for (let i = 1; i < jobs.length; i++) expect(jobs[i]!.seq).toBeGreaterThan(jobs[i - 1]!.seq);
            expect(jobs[0]!.seq).toBeGreaterThanOrEqual(previousHead);
            previousHead = jobs[0]!.seq;
            const head = jobs[0]!;
            for (const j of jobs) {
              expect(j.runsOn).toEqual(g.labels);
              expect(j.spec.role).toBe(head.spec.role);
              expect(j.spec.container?.image).toBe(head.spec.container?.image);
              seen.push(j.id);
            }
          }
          expect(seen.sort()).toEqual([...model.keys()].sort());
          for (const [mid, mj] of model) expect(q.get(mid)).toBe(mj);
        }
      }),
      { numRuns: 300 },
    );
  });
});
