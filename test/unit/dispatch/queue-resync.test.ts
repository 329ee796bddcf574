/**
 * A large queue on the shared store: a wake-up re-reads only what it names (new rows from a place
 * in the queue on, or jobs requeued by id), a full re-read still finds everything, and a start-up
 * reads the queue a page at a time without losing its order. Real Dispatchers on one real PGlite
 * store, standing in for instances on one database.
 */
import { pino } from 'pino';
import { describe, expect, it, vi } from 'vitest';
import { Dispatcher } from '../../../src/dispatch/dispatcher.js';
import { runSpecSchema } from '../../../src/jobs/run-spec.js';
import { Metrics } from '../../../src/server/metrics.js';
import type { NewJob } from '../../../src/store/jobs-repo.js';
import { systemClock } from '../../../src/util/clock.js';
import { storePerFile } from '../../helpers/store-per-file.js';

const fresh = storePerFile();
const { stops } = fresh;

/** An instance; `hold` keeps its passes from running (the re-read alone is under test). */
function instance(id: string, hold = true): Dispatcher {
  const d = new Dispatcher({
    store: fresh.store,
    clock: systemClock,
    logger: pino({ level: 'silent' }),
    instanceId: id,
    claimAtSubmit: false,
  });
  if (hold) d.holdNewWorkWhile(() => true);
  stops.push(() => d.stop());
  return d;
}

const jobSpec = runSpecSchema.parse({ jobs: { a: { runsOn: ['nowhere'], steps: [{ run: 'true' }] } } }).jobs
  .a!;
let runNo = 0;
/** A run of `n` queued jobs stored by "another instance" (straight into the store). */
async function storeRun(n: number): Promise<{ id: string; seq: number }[]> {
  const run = `r-resync-${++runNo}`;
  const jobs: NewJob[] = Array.from({ length: n }, (_, i) => ({
    id: `j-${runNo}-${i}`,
    name: `j${i}`,
    runsOn: ['nowhere'],
    spec: jobSpec,
  }));
  const rows = await fresh.store.jobs.insertRun({ id: run, name: null }, jobs, new Date());
  return rows.map((r) => ({ id: r.id, seq: Number(r.seq) }));
}

describe('re-reading the shared queue', () => {
  it('a hinted re-read takes the rows queued after the last one seen, and a requeued job by id', async () => {
    const first = await storeRun(3);
    const d = instance('a');
    expect(await d.resyncQueued()).toBe(3); // full: everything
    const next = await storeRun(2);
    expect(await d.resyncQueued({})).toBe(2); // after the last row seen
    expect(d.queue.size).toBe(5);
    // A job another instance took and gave back keeps its old place: only its id finds it.
    const back = first[1]!.id;
    d.queue.remove(back);
    expect(await d.resyncQueued({})).toBe(0);
    expect(d.queue.get(back)).toBeUndefined();
    expect(await d.resyncQueued({ ids: [back, 'j-not-there'] })).toBe(1);
    expect(d.queue.get(back)).toBeDefined();
    // A run that committed late with lower places than rows already seen: its first place is named.
    d.queue.remove(next[0]!.id);
    expect(await d.resyncQueued({ fromSeq: next[0]!.seq })).toBe(1);
    expect(d.queue.size).toBe(5);
  });

  it('a full re-read finds every queued job not held, whatever its place', async () => {
    const rows = await storeRun(4);
    const d = instance('a');
    expect(await d.resyncQueued({})).toBe(4); // a fresh instance has seen nothing: everything is new
    d.queue.remove(rows[0]!.id);
    d.queue.remove(rows[2]!.id);
    expect(await d.resyncQueued({})).toBe(0);
    expect(await d.resyncQueued()).toBe(2);
    expect(await d.resyncQueued()).toBe(0); // held now: not added twice
  });

  it("an instance's own queued jobs count as seen: the next wake-up does not read them again", async () => {
    const d = instance('a');
    await d.submit(runSpecSchema.parse({ jobs: { x: { runsOn: ['nowhere'], steps: [{ run: 'true' }] } } }));
    await d.submit(runSpecSchema.parse({ jobs: { y: { runsOn: ['nowhere'], steps: [{ run: 'true' }] } } }));
    const pages = vi.spyOn(fresh.store.jobs, 'listQueuedPage');
    try {
      expect(await d.resyncQueued({})).toBe(0); // both held already
      const first = await Promise.all(pages.mock.results.map((r) => r.value as Promise<unknown[]>));
      expect(first.flat()).toHaveLength(2);
      pages.mockClear();
      expect(await d.resyncQueued({})).toBe(0);
      const second = await Promise.all(pages.mock.results.map((r) => r.value as Promise<unknown[]>));
      expect(second.flat()).toHaveLength(0);
    } finally {
      pages.mockRestore();
    }
  });

  it('a start-up reads the queue page by page, in submission order', async () => {
    // More than one page (5,000 rows a page).
    const rows = await storeRun(5_200);
    const d = instance('a');
    expect(await d.recover()).toEqual({ queued: 5_200, awaiting: 0 });
    const held = d.queue.orderedGroups().flatMap((g) => [...g.jobs()].map((j) => j.id));
    expect(held).toEqual(rows.map((r) => r.id));
    // Nothing new after the start-up: a wake-up reads nothing.
    expect(await d.resyncQueued({})).toBe(0);
  }, 60_000);

  it('each dispatch pass is counted on /metrics with its planning time', async () => {
    await storeRun(2);
    const d = instance('a', false);
    await d.recover();
    const before = d.passStats().passes;
    await d.requestPump();
    const after = d.passStats();
    expect(after.passes).toBe(before + 1);
    expect(after.planMs).toBeGreaterThan(0);
    expect(after.passMs).toBeGreaterThanOrEqual(after.planMs);
    const m = new Metrics();
    m.refresh(d);
    const text = await m.registry.metrics();
    expect(text).toMatch(new RegExp(`^kici_orch_dispatch_passes_total ${after.passes}$`, 'm'));
    expect(text).toMatch(/^kici_orch_dispatch_plan_seconds_total \d/m);
    // A second scrape moves the counters by what happened in between, not by the totals again.
    m.refresh(d);
    expect(await m.registry.metrics()).toMatch(
      new RegExp(`^kici_orch_dispatch_passes_total ${after.passes}$`, 'm'),
    );
  });
});
