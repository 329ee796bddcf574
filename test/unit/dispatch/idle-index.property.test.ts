/**
 * The idle-agent index picks exactly as the full scan did: for random fleets (static and scaler
 * agents, busy, draining, held, used single-use, reconnected under the same id, gone) and random
 * queues (label sets, roles, container jobs, excluded labels, priorities, owners), a plan made
 * through the index equals the plan made from the sorted list of every idle agent.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  AgentRegistry,
  newConnectedAgent,
  type ConnectedAgent,
} from '../../../src/dispatch/agent-registry.js';
import { planDispatch } from '../../../src/dispatch/dispatch-plan.js';
import { JobQueue, type QueuedJob } from '../../../src/dispatch/job-queue.js';

type Of<T> = T extends fc.Arbitrary<infer V> ? V : never;

const LABELS = [
  'linux',
  'arm64',
  'gpu',
  'big',
  'kici:role:execution',
  'kici:role:builder',
  'kici:runtime:docker',
];

/** True now and then: most agents of a fleet are free, so that several compete for each job. */
const rarely = (weight: number) =>
  fc.oneof({ arbitrary: fc.constant(false), weight }, { arbitrary: fc.constant(true), weight: 1 });

const agentArb = fc.record({
  id: fc.integer({ min: 0, max: 25 }),
  // Few shapes, so that several shapes often fit one job and their agents interleave in line.
  labels: fc.oneof(fc.subarray(LABELS.slice(0, 3), { minLength: 1 }), fc.subarray(LABELS, { minLength: 1 })),
  scaled: fc.option(fc.record({ gate: fc.subarray(['gpu', 'big'], { maxLength: 1 }) }), { nil: null }),
  version: fc.constantFrom(undefined, '0.0.9', '0.1.0'),
  busy: rarely(2),
  draining: rarely(8),
  held: rarely(8),
  used: rarely(3),
});

const opArb = fc.oneof(
  { arbitrary: agentArb.map((a) => ({ op: 'add' as const, a })), weight: 6 },
  { arbitrary: fc.integer({ min: 0, max: 25 }).map((id) => ({ op: 'remove' as const, id })), weight: 1 },
  { arbitrary: fc.integer({ min: 0, max: 25 }).map((id) => ({ op: 'free' as const, id })), weight: 1 },
);

const jobArb = fc.record({
  runsOn: fc.oneof(fc.constant<string[]>(['linux']), fc.subarray(LABELS.slice(0, 4), { minLength: 1 })),
  role: fc.constantFrom(undefined, 'build', 'init'),
  container: fc.boolean(),
  exclude: fc.subarray(['gpu', 'big'], { maxLength: 1 }),
  priority: fc.integer({ min: 0, max: 2 }),
  owner: fc.constantFrom('a', 'b', undefined),
});

function fleet(ops: Of<typeof opArb>[]): AgentRegistry {
  const r = new AgentRegistry();
  for (const o of ops) {
    if (o.op === 'remove') {
      r.remove(`a${o.id}`);
      continue;
    }
    if (o.op === 'free') {
      const a = r.get(`a${o.id}`);
      if (a?.busyJobId) a.freeFrom(a.busyJobId);
      continue;
    }
    const { a } = o;
    const agent: ConnectedAgent = newConnectedAgent({
      id: `a${a.id}`,
      labels: a.labels,
      scaled: a.scaled ? { gate: a.scaled.gate, scalerName: 's' } : null,
      version: a.version,
      jobsDone: a.used ? 1 : 0,
      nowMs: 0,
      send: () => {},
      close: () => {},
    });
    if (a.busy) agent.holdResult('running');
    if (a.draining) agent.drain();
    if (a.held) r.hold(agent.id);
    else r.release(agent.id);
    r.add(agent);
  }
  return r;
}

function queue(jobs: Of<typeof jobArb>[]): JobQueue {
  const q = new JobQueue();
  jobs.forEach((j, i) =>
    q.add({
      id: `j${i}`,
      runId: 'r',
      name: `j${i}`,
      seq: i,
      runsOn: j.runsOn,
      spec: {
        role: j.role as QueuedJob['spec']['role'],
        ...(j.container ? { container: { image: 'img' } as never } : {}),
        ...(j.exclude.length ? { excludeLabels: j.exclude } : {}),
      },
      createdAtMs: i,
      priority: j.priority,
      owner: j.owner,
    }),
  );
  return q;
}

describe('idle-agent index', () => {
  it('picks the same agents for the same jobs as the full scan of idle agents', () => {
    fc.assert(
      fc.property(
        fc.array(opArb, { minLength: 4, maxLength: 60 }),
        fc.array(jobArb, { minLength: 1, maxLength: 30 }),
        (ops, jobs) => {
          const r = fleet(ops);
          const scan = planDispatch(queue(jobs), r.idle(), undefined, 0).plan;
          const indexed = planDispatch(queue(jobs), r.free(), undefined, 0).plan;
          expect(indexed).toEqual(scan);
          expect(r.anyIdle()).toBe(r.idle().length > 0);
        },
      ),
      { numRuns: 1000 },
    );
  });

  it('says no agent is free exactly when no pick in the pass could return one', () => {
    fc.assert(
      fc.property(
        fc.array(opArb, { minLength: 4, maxLength: 60 }),
        fc.array(fc.subarray(LABELS.slice(0, 4), { minLength: 1 }), { maxLength: 30 }),
        fc.boolean(),
        (ops, wants, askFirst) => {
          const r = fleet(ops);
          const free = r.free();
          const left = new Set(r.idle());
          // Asked before the first pick or only after some: the count starts wherever it is asked.
          if (askFirst) expect(free.none!()).toBe(left.size === 0);
          for (const want of wants) {
            const a = free.matching((x) => want.every((l) => x.labels.has(l)))();
            if (a) left.delete(a);
            expect(free.none!()).toBe(left.size === 0);
          }
        },
      ),
      { numRuns: 500 },
    );
  });

  it('keeps a reconnected agent in its place in line, as the registry list does', () => {
    const r = new AgentRegistry();
    const mk = (id: string) =>
      newConnectedAgent({ id, labels: ['linux'], scaled: null, nowMs: 0, send: () => {}, close: () => {} });
    r.add(mk('first'));
    r.add(mk('second'));
    r.add(mk('first')); // a newer connection of "first" before the old one's close is seen
    const plan = planDispatch(
      queue([
        { runsOn: ['linux'], role: undefined, container: false, exclude: [], priority: 0, owner: undefined },
      ]),
      r.free(),
      undefined,
      0,
    ).plan;
    expect(plan[0]!.assign).toEqual([{ jobId: 'j0', agentId: 'first' }]);
    expect(r.idle().map((a) => a.id)).toEqual(['first', 'second']);
  });
});
