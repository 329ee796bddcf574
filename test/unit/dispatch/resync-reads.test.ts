/**
 * The shared queue's re-read on the real PGlite store: whole rows are read only for the queued
 * jobs this dispatcher does not hold, so a wake-up for its own submits parses none.
 */
import type { KyselyPlugin } from 'kysely';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { Dispatcher } from '../../../src/dispatch/dispatcher.js';
import { runSpecSchema } from '../../../src/jobs/run-spec.js';
import { createStore } from '../../../src/store/index.js';
import { systemClock } from '../../../src/util/clock.js';
import { storePerFile } from '../../helpers/store-per-file.js';

const fresh = storePerFile();
const { stops } = fresh;

/** A store view that counts the whole job rows (those with a spec) its statements return. */
function counting() {
  const seen = { wholeRows: 0 };
  const plugin: KyselyPlugin = {
    transformQuery: (args) => args.node,
    transformResult: async (args) => {
      for (const row of args.result.rows) if ('spec' in (row as object)) seen.wholeRows++;
      return args.result;
    },
  };
  return { seen, store: createStore(fresh.store.db.withPlugin(plugin)) };
}

const spec = (n: number) =>
  runSpecSchema.parse({
    jobs: Object.fromEntries(
      Array.from({ length: n }, (_, i) => [
        `j${i}`,
        { runsOn: ['linux', 'nobody'], steps: [{ run: 'true' }] },
      ]),
    ),
  });

describe('dispatcher: re-reading the shared queue', () => {
  it('reads no whole row for its own queued jobs, and only the new ones a peer stored', async () => {
    const { seen, store } = counting();
    const d = new Dispatcher({ store, clock: systemClock, logger: pino({ level: 'silent' }) });
    stops.push(() => d.stop());
    await d.submit(spec(5));
    expect(d.queue.size).toBe(5);
    seen.wholeRows = 0;
    expect(await d.resyncQueued()).toBe(0);
    expect(seen.wholeRows).toBe(0);
    // A peer's submit: rows this dispatcher has never seen.
    const peerJobs = ['p-1', 'p-2'].map((id) => ({
      id,
      name: id,
      runsOn: ['linux', 'nobody'],
      spec: { steps: [] },
    }));
    await fresh.store.jobs.insertRun({ id: 'r-peer', name: null }, peerJobs, new Date());
    expect(await d.resyncQueued()).toBe(2);
    expect(seen.wholeRows).toBe(2);
    expect(d.queue.size).toBe(7);
    expect(d.queue.get('p-2')?.runId).toBe('r-peer');
  });
});
