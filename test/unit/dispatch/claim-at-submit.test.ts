/**
 * Idle agents take new jobs in the submit's own commit: the job's row is stored already claimed,
 * and its assignment leaves without waiting for a dispatch pass or a second statement.
 */
import fc from 'fast-check';
import { countingStatements } from '../../helpers/statement-count.js';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { Dispatcher } from '../../../src/dispatch/dispatcher.js';
import { runSpecSchema } from '../../../src/jobs/run-spec.js';
import { createStore, type Store } from '../../../src/store/index.js';
import { systemClock } from '../../../src/util/clock.js';
import { storePerFile, wipeStore } from '../../helpers/store-per-file.js';
import { connectAgent } from '../../helpers/dispatcher-agent.js';

const fresh = storePerFile();
const { stops } = fresh;

function setup(store: Store = fresh.store) {
  const d = new Dispatcher({ store, clock: systemClock, logger: pino({ level: 'silent' }) });
  stops.push(() => d.stop());
  return d;
}

const connect = connectAgent;

const spec = (n: number, runsOn = ['linux']) =>
  runSpecSchema.parse({
    jobs: Object.fromEntries(
      Array.from({ length: n }, (_, i) => [`j${i}`, { runsOn, steps: [{ run: 'true' }] }]),
    ),
  });

/** Counts the statements sent to the store. */
function counted() {
  const { n, db } = countingStatements(fresh.store.db);
  return { n, store: createStore(db) };
}

describe('dispatcher: idle agents take new jobs in the submit’s commit', () => {
  it('an idle agent is sent its job by the time the submit answers, with no claim statement of its own', async () => {
    const { n, store } = counted();
    const d = setup(store);
    const a = connect(d, 'idle-1');
    const { jobs } = await d.submit(spec(1));
    expect(a.assigned()).toEqual([jobs[0]!.id]);
    // The run's insert and the jobs' insert: no update of the row afterwards.
    expect(n.statements).toBe(2);
    const row = (await fresh.store.jobs.get(jobs[0]!.id))!;
    expect([row.state, row.agent_id, row.attempts]).toEqual(['dispatched', 'idle-1', 1]);
    expect(row.dispatched_at).not.toBeNull();
    expect(d.queue.size).toBe(0);
    expect(d.active.has(jobs[0]!.id)).toBe(true);
  });

  it('jobs beyond the idle agents are queued, and older queued work goes first', async () => {
    const d = setup();
    d.noteStaticToken('idle-2', ['linux', 'nobody-yet'], null); // its jobs wait for it
    const older = await d.submit(spec(1, ['linux', 'nobody-yet']));
    await d.requestPump();
    const a = connect(d, 'idle-2', ['linux', 'nobody-yet']);
    // Something older waits: the new run is queued behind it, and the pass takes the older one.
    const newer = await d.submit(spec(2, ['linux', 'nobody-yet']));
    await d.requestPump();
    expect(a.assigned()).toEqual([older.jobs[0]!.id]);
    expect(d.queue.size).toBe(2);
    for (const j of newer.jobs) expect((await fresh.store.jobs.get(j.id))!.state).toBe('queued');
  });

  it('a failed insert leaves the agent idle and stores nothing', async () => {
    const jobs = Object.create(fresh.store.jobs) as Store['jobs'];
    jobs.insertRunHeld = () => Promise.reject(new Error('Connection terminated unexpectedly'));
    const d = setup({ ...fresh.store, jobs });
    const a = connect(d, 'idle-3');
    await expect(d.submit(spec(1))).rejects.toThrow(/terminated/);
    expect(a.agent.busyJobId).toBeUndefined();
    expect(a.agent.jobsTaken).toBe(0);
    expect(d.registry.idle().map((x) => x.id)).toEqual(['idle-3']);
    expect(a.assigned()).toEqual([]);
  });

  it('an agent that left while the insert was in flight is not sent the job; it is queued again', async () => {
    const jobs = Object.create(fresh.store.jobs) as Store['jobs'];
    const d = setup({ ...fresh.store, jobs });
    const a = connect(d, 'leaves-1');
    jobs.insertRunHeld = async (...args) => {
      const held = await fresh.store.jobs.insertRunHeld(...args);
      d.registry.remove(a.agent.id, a.agent); // its socket closed meanwhile
      return held;
    };
    const { jobs: ids } = await d.submit(spec(1));
    const id = ids[0]!.id;
    expect(a.assigned()).toEqual([]);
    await d.requestPump();
    expect((await fresh.store.jobs.get(id))!.state).toBe('queued');
    expect(d.queue.get(id)).toBeDefined();
    const b = connect(d, 'stays-1');
    await d.requestPump();
    expect(b.assigned()).toEqual([id]);
  });

  it('property: whatever the agents and runs, each job goes to at most one agent, and rows agree', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.constantFrom('a', 'b'), { minLength: 0, maxLength: 4 }),
        fc.array(fc.record({ n: fc.integer({ min: 1, max: 4 }), label: fc.constantFrom('a', 'b') }), {
          minLength: 1,
          maxLength: 4,
        }),
        async (agentLabels, runs) => {
          const d = setup();
          for (const l of ['a', 'b']) d.noteStaticToken(`scope-${l}`, ['linux', l], null);
          const agents = agentLabels.map((l, i) => connect(d, `p-${i}-${l}`, ['linux', l]));
          const ids: string[] = [];
          for (const r of runs)
            ids.push(...(await d.submit(spec(r.n, ['linux', r.label]))).jobs.map((j) => j.id));
          await d.requestPump();
          const given = agents.flatMap((a) => a.assigned());
          expect(new Set(given).size).toBe(given.length);
          for (const a of agents) expect(a.assigned().length).toBeLessThanOrEqual(1);
          for (const id of ids) {
            const row = (await fresh.store.jobs.get(id))!;
            const holder = agents.find((a) => a.assigned().includes(id));
            expect(row.state).toBe(holder ? 'dispatched' : 'queued');
            if (holder) expect(row.agent_id).toBe(holder.agent.id);
          }
          await d.stop();
          await wipeStore(fresh.store);
        },
      ),
      { numRuns: 25 },
    );
  });
});
