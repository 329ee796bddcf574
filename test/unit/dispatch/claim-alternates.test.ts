/**
 * In a cluster a claim carries, after its planned job, the next few queued jobs of the group, and
 * the store gives the agent the first of them still queued: a job a peer took since this instance
 * read the queue costs no second statement. Real Dispatchers on one real PGlite store, the "peer"
 * claiming straight in the store.
 */
import fc from 'fast-check';
import { pino } from 'pino';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { ALTERNATES } from '../../../src/dispatch/claim-alternates.js';
import { Dispatcher } from '../../../src/dispatch/dispatcher.js';
import { runSpecSchema } from '../../../src/jobs/run-spec.js';
import { systemClock } from '../../../src/util/clock.js';
import { storePerFile, wipeStore } from '../../helpers/store-per-file.js';
import { connectAgent } from '../../helpers/dispatcher-agent.js';

const fresh = storePerFile();
const { stops } = fresh;
afterEach(() => vi.restoreAllMocks());

/** An instance of a cluster whose passes wait until `go()`. */
function instance(id: string | undefined) {
  let held = true;
  const d = new Dispatcher({
    store: fresh.store,
    clock: systemClock,
    logger: pino({ level: 'silent' }),
    instanceId: id,
    claimAtSubmit: false,
  });
  d.holdNewWorkWhile(() => held);
  stops.push(() => d.stop());
  return {
    d,
    go: () => {
      held = false;
      return d.requestPump();
    },
  };
}

const connect = (d: Dispatcher, id: string) => connectAgent(d, id).assigned;

const jobSpec = runSpecSchema.parse({ jobs: { a: { runsOn: ['linux'], steps: [{ run: 'true' }] } } }).jobs.a!;
let runNo = 0;
/** `n` queued jobs stored by another instance, in submission order. */
async function storeRun(n: number): Promise<string[]> {
  const run = `r-alt-${++runNo}`;
  const rows = await fresh.store.jobs.insertRun(
    { id: run, name: null },
    Array.from({ length: n }, (_, i) => ({
      id: `j-${runNo}-${i}`,
      name: `j${i}`,
      runsOn: ['linux'],
      spec: jobSpec,
    })),
    new Date(),
  );
  return rows.map((r) => r.id);
}

/** Every claim statement an instance sends, whichever way it goes. */
function claimCalls() {
  const jobs = fresh.store.jobs;
  const spies = [vi.spyOn(jobs, 'claimSpec'), vi.spyOn(jobs, 'claimMany')];
  return () => spies.reduce((n, s) => n + s.mock.calls.length, 0);
}

const queued = (d: Dispatcher) => d.queue.orderedGroups().flatMap((g) => [...g.jobs()].map((j) => j.id));

describe('claims with alternates (a cluster)', () => {
  it('a planned job a peer took: the agent gets the next one queued, in the same statement', async () => {
    const ids = await storeRun(7);
    const b = instance('b');
    await b.d.recover();
    // A peer took the first two since b read the queue.
    for (const id of ids.slice(0, 2)) expect(await fresh.store.jobs.claim(id, 'peer', new Date())).toBe(true);
    const assigned = connect(b.d, 'b-1');
    const calls = claimCalls();
    await b.go();
    expect(assigned()).toEqual([ids[2]]);
    expect(calls()).toBe(1);
    const row = (await fresh.store.jobs.get(ids[2]!))!;
    expect([row.state, row.agent_id, row.owner_instance]).toEqual(['dispatched', 'b-1', 'b']);
    expect(b.d.active.has(ids[2]!)).toBe(true);
    // The planned job is the peer's (dropped); the alternates not taken are back in their places.
    expect(queued(b.d)).toEqual([ids[1], ...ids.slice(3)]);
  });

  it('every candidate taken by a peer: the agent looks again and takes the next job still queued', async () => {
    const ids = await storeRun(ALTERNATES + 3);
    const b = instance('b');
    await b.d.recover();
    for (const id of ids.slice(0, ALTERNATES + 1)) await fresh.store.jobs.claim(id, 'peer', new Date());
    const assigned = connect(b.d, 'b-1');
    const calls = claimCalls();
    await b.go();
    expect(assigned()).toEqual([ids[ALTERNATES + 1]]);
    expect(calls()).toBe(2);
    // The second claim planned ids[1] (a peer's: dropped) with the next ones as alternates.
    expect(queued(b.d)).toEqual(ids.slice(2, ALTERNATES + 1).concat(ids.slice(ALTERNATES + 2)));
  });

  it('alone (no instance id), a claim carries no alternates', async () => {
    const ids = await storeRun(3);
    const solo = instance(undefined);
    await solo.d.recover();
    const many = vi.spyOn(fresh.store.jobs, 'claimMany');
    const assigned = connect(solo.d, 's-1');
    await solo.go();
    expect(assigned()).toEqual([ids[0]]);
    expect(many.mock.calls.flatMap((c) => c[0]).some((c) => c.alts?.length)).toBe(false);
  });

  it('a claim statement that fails: its alternates are checked and queued again, none lost', async () => {
    const ids = await storeRun(ALTERNATES + 2);
    const b = instance('b');
    await b.d.recover();
    connect(b.d, 'b-1');
    // The connection breaks while the statement is out, and the agent leaves with it (so nothing
    // claims again before the checks are done).
    vi.spyOn(fresh.store.jobs, 'claimMany').mockImplementationOnce(() => {
      b.d.registry.remove('b-1');
      return Promise.reject(new Error('Connection terminated'));
    });
    // The planned job and each alternate are settled by a conditional requeue (retried in the
    // background), then queued again.
    const jobs = fresh.store.jobs;
    const requeue = jobs.requeue.bind(jobs);
    const checked: string[] = [];
    let allChecked!: () => void;
    const done = new Promise<void>((r) => (allChecked = r));
    vi.spyOn(jobs, 'requeue').mockImplementation(async (id, agentId) => {
      const r = await requeue(id, agentId);
      if (checked.push(id) === ALTERNATES + 1) allChecked();
      return r;
    });
    await b.go();
    await done;
    expect(new Set(checked)).toEqual(new Set(ids.slice(0, ALTERNATES + 1)));
    await new Promise<void>((r) => setImmediate(r));
    expect(queued(b.d)).toEqual(ids);
    expect((await fresh.store.jobs.listQueuedIds()).map((r) => r.id)).toEqual(ids);
  });

  it('property: whatever a peer took, each job goes to at most one agent, as the store says, and no queued job leaves the queue', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.boolean(), { minLength: 4, maxLength: 12 }),
        fc.integer({ min: 1, max: 3 }),
        async (peerTook, agents) => {
          const ids = await storeRun(peerTook.length);
          const b = instance('b');
          await b.d.recover();
          for (const [i, took] of peerTook.entries())
            if (took) await fresh.store.jobs.claim(ids[i]!, 'peer', new Date());
          const assigned = Array.from({ length: agents }, (_, i) => connect(b.d, `b-${i}`));
          await b.go();
          const got = assigned.flatMap((a, i) => a().map((id) => [id, `b-${i}`] as const));
          expect(new Set(got.map(([id]) => id)).size).toBe(got.length);
          for (const a of assigned) expect(a().length).toBeLessThanOrEqual(1);
          for (const [id, agent] of got) {
            const row = (await fresh.store.jobs.get(id))!;
            expect([row.state, row.agent_id]).toEqual(['dispatched', agent]);
          }
          // As many agents busy as there were jobs left for them.
          const left = peerTook.filter((t) => !t).length;
          expect(got.length).toBe(Math.min(agents, left));
          // Every job still queued in the store is on b's queue, once, in submission order.
          const still = (await fresh.store.jobs.listQueuedIds()).map((r) => r.id);
          const mine = queued(b.d);
          expect(mine.filter((id) => still.includes(id))).toEqual(still);
          expect(new Set(mine).size).toBe(mine.length);
          for (const s of stops.splice(0)) await s();
          await wipeStore(fresh.store);
        },
      ),
      { numRuns: 25 },
    );
  }, 120_000);
});
