/** Priority and owner are stored with the job: a restarted dispatcher queues jobs in the same order. */
import { pino } from 'pino';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { Dispatcher } from '../../../src/dispatch/dispatcher.js';
import { ManualClock } from '../../../src/util/clock.js';
import { freshStore } from '../../helpers/data-dir.js';

const logger = pino({ level: process.env.DBG ? 'debug' : 'silent' });
let fresh: Awaited<ReturnType<typeof freshStore>>;

beforeEach(async () => {
  fresh = await freshStore();
});
afterEach(async () => {
  await fresh.close();
});

const job = (priority?: number) => ({
  runsOn: ['linux'],
  steps: [{ run: 'true' }],
  role: 'execution' as const,
  ...(priority === undefined ? {} : { priority }),
});

const order = (d: Dispatcher) =>
  d.queue
    .orderedGroups()
    .flatMap((g) => [...g.jobs()].map((j) => `${j.name}:${j.priority ?? 0}:${j.owner ?? ''}`));

it('queued jobs read back after a restart keep their priority, owner and order', async () => {
  const clock = new ManualClock(1_000_000);
  const first = new Dispatcher({ store: fresh.store, clock, logger });
  // No agent and no scaler, but a static agent's token could connect: every job stays queued.
  first.noteStaticToken('agent-static', ['linux'], null);
  await first.submit({ owner: 'a', jobs: { a1: job(), a2: job(), a3: job() } });
  await first.submit({ owner: 'b', priority: 0, jobs: { b1: job(), b2: job() } });
  await first.submit({ jobs: { urgent: job(5), plain: job() } });
  const before = order(first);
  expect(before).toEqual(['urgent:5:', 'a1:0:a', 'b1:0:b', 'plain:0:', 'a2:0:a', 'b2:0:b', 'a3:0:a']);
  await first.stop();

  const second = new Dispatcher({ store: fresh.store, clock, logger });
  expect(await second.recover()).toEqual({ queued: 7, awaiting: 0 });
  expect(order(second)).toEqual(before);
  const stored = await fresh.store.jobs.listQueued();
  expect(stored.find((r) => r.name === 'urgent')).toMatchObject({ priority: 5, owner: null });
  expect(stored.find((r) => r.name === 'b2')).toMatchObject({ priority: 0, owner: 'b' });
  await second.stop();
});
