/**
 * Database outage: writes whose answer was lost must not strand or double a job. A real Dispatcher
 * on the real PGlite store; only the failure is injected, after or instead of the real statement,
 * as a connection broken around a commit would look.
 */
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { Dispatcher } from '../../../src/dispatch/dispatcher.js';
import { runSpecSchema } from '../../../src/jobs/run-spec.js';
import { systemClock } from '../../../src/util/clock.js';
import { retryWrite } from '../../../src/util/retry-write.js';
import { storePerFile } from '../../helpers/store-per-file.js';
import { connectAgent } from '../../helpers/dispatcher-agent.js';
import { eventually } from '../../helpers/orchestrator.js';

const fresh = storePerFile();
const { stops } = fresh;

const broken = () => new Error('Connection terminated unexpectedly');

function setup() {
  const d = new Dispatcher({
    store: fresh.store,
    clock: systemClock,
    logger: pino({ level: 'silent' }),
    // These tests are about the dispatch pass's claims: every job is queued first.
    claimAtSubmit: false,
  });
  stops.push(() => d.stop());
  return d;
}

const connect = connectAgent;

const spec = runSpecSchema.parse({ jobs: { a: { runsOn: ['linux'], steps: [{ run: 'true' }] } } });

describe('dispatcher: store answers lost around a commit', () => {
  it('a claim that committed but whose answer was lost is undone, and the job runs once on a later pass', async () => {
    const d = setup();
    const jobs = fresh.store.jobs;
    const real = jobs.claimSpecHeld.bind(jobs);
    let failures = 1;
    jobs.claimSpecHeld = async (...args) => {
      const r = await real(...args);
      if (failures-- > 0) {
        await r.durable();
        throw broken(); // committed, answer lost
      }
      return r;
    };
    stops.push(async () => {
      jobs.claimSpecHeld = real;
    });
    const a = connect(d, 'outage-a');
    const { jobs: ids } = await d.submit(spec);
    const id = ids[0]!.id;
    await d.requestPump();
    expect(a.messages.filter((m) => m.type === 'job.assign')).toEqual([]);
    // The undo puts the row back to queued and the job back in the queue; the next pass assigns it.
    await eventually(() => a.messages.some((m) => m.type === 'job.assign'), 10_000, 'the job reassigned');
    expect(a.messages.filter((m) => m.type === 'job.assign')).toHaveLength(1);
    const row = await jobs.get(id);
    expect([row!.state, row!.agent_id, row!.attempts]).toEqual(['dispatched', 'outage-a', 2]);
  });

  it('a claim that never reached the store leaves the job queued and it is assigned once the store is back', async () => {
    const d = setup();
    const jobs = fresh.store.jobs;
    const real = jobs.claimSpecHeld.bind(jobs);
    let down = true;
    jobs.claimSpecHeld = (...args) => (down ? Promise.reject(broken()) : real(...args));
    const realRequeue = jobs.requeue.bind(jobs);
    let requeueTries = 0;
    jobs.requeue = (...args) => {
      requeueTries++;
      return down ? Promise.reject(broken()) : realRequeue(...args);
    };
    stops.push(async () => {
      jobs.claimSpecHeld = real;
      jobs.requeue = realRequeue;
    });
    const a = connect(d, 'outage-b');
    const { jobs: ids } = await d.submit(spec);
    await d.requestPump();
    // The undo has failed and been retried at least once.
    await eventually(() => requeueTries >= 2, 10_000, 'the undo retried');
    // Neither queued in memory nor active while its fate is unknown: no second agent could take it.
    expect(d.queue.get(ids[0]!.id)).toBeUndefined();
    expect(d.active.has(ids[0]!.id)).toBe(false);
    expect((await d.resyncQueued()) === 0).toBe(true);
    down = false;
    await eventually(
      () => a.messages.some((m) => m.type === 'job.assign'),
      10_000,
      'assigned after recovery',
    );
    expect((await jobs.get(ids[0]!.id))!.attempts).toBe(1);
  });

  it('resync picks up a queued row the process does not hold (a run whose insert answer was lost)', async () => {
    const d = setup();
    const a = connect(d, 'outage-c');
    a.agent.take('elsewhere'); // not idle: the job must wait in the queue
    const rows = await fresh.store.jobs.insertRun(
      { id: 'r-lost', name: null },
      [{ id: 'j-lost', name: 'a', runsOn: ['linux'], spec: spec.jobs.a! }],
      new Date(),
    );
    expect(rows).toHaveLength(1);
    expect(d.queue.get('j-lost')).toBeUndefined();
    expect(await d.resyncQueued()).toBe(1);
    expect(d.queue.get('j-lost')).toBeDefined();
    expect(await d.resyncQueued()).toBe(0); // held now: not added twice
  });

  it('job started: a failed "running" mark is retried until stored', async () => {
    const d = setup();
    const jobs = fresh.store.jobs;
    const real = jobs.markRunning.bind(jobs);
    let failures = 2;
    jobs.markRunning = (...args) => (failures-- > 0 ? Promise.reject(broken()) : real(...args));
    stops.push(async () => {
      jobs.markRunning = real;
    });
    const a = connect(d, 'outage-d');
    const { jobs: ids } = await d.submit(spec);
    await d.requestPump();
    await d.active.onJobStarted('outage-d', ids[0]!.id);
    expect(a.agent.busyJobId).toBe(ids[0]!.id);
    await eventually(async () => (await jobs.get(ids[0]!.id))!.state === 'running', 10_000, 'marked running');
  });
});

describe('retryWrite', () => {
  it('retries failures and "not yet" until done, and stops when no longer wanted', async () => {
    let calls = 0;
    const done = await retryWrite(
      async () => {
        calls++;
        if (calls === 1) throw broken();
        return calls >= 3;
      },
      () => true,
      () => undefined,
      { firstMs: 5, maxMs: 10 },
    );
    expect([done, calls]).toEqual([true, 3]);
    let wanted = true;
    let n = 0;
    const gaveUp = retryWrite(
      async () => {
        if (++n === 2) wanted = false;
        return false;
      },
      () => wanted,
      () => undefined,
      { firstMs: 5, maxMs: 10 },
    );
    expect(await gaveUp).toBe(false);
    expect(n).toBe(2);
  });
});
