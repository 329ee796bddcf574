/**
 * The writes that gate a job's start (the submit that claims an idle agent, a pass's claim) hold
 * their sync until the job has left, and the submit is answered only once it is done
 * (src/store/sync-gate.ts). On the real embedded database on disk, each sync is recorded with what
 * the agent had been sent by then and whether the submit had been answered.
 */
import { fdatasyncSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { Dispatcher } from '../../../src/dispatch/dispatcher.js';
import { runSpecSchema } from '../../../src/jobs/run-spec.js';
import { createStore, openDatabase, type OpenedDatabase } from '../../../src/store/index.js';
import { systemClock } from '../../../src/util/clock.js';
import { freshDataDir } from '../../helpers/data-dir.js';
import { connectAgent } from '../../helpers/dispatcher-agent.js';

let opened: OpenedDatabase | undefined;
let dispatcher: Dispatcher | undefined;
let dir: string | undefined;
afterEach(async () => {
  await dispatcher?.stop();
  await opened?.close().catch(() => {}); // after a refused sync the database may refuse to close cleanly
  if (dir) await rm(dir, { recursive: true, force: true });
  opened = dispatcher = dir = undefined;
});

interface Seen {
  assigned: number;
  answered: boolean;
}

async function setup() {
  dir = await freshDataDir();
  const seen: Seen[] = [];
  const now = { assigned: () => 0, answered: false, broken: false };
  opened = await openDatabase({
    dataDir: dir,
    dataSync: 'on',
    fileSync: (fd) => {
      if (now.broken) throw Object.assign(new Error('EIO: i/o error, fdatasync'), { code: 'EIO' });
      seen.push({ assigned: now.assigned(), answered: now.answered });
      fdatasyncSync(fd);
    },
  });
  expect(opened.syncGate).toBeDefined();
  const store = createStore(opened.db, opened.engine, opened.syncGate);
  dispatcher = new Dispatcher({ store, clock: systemClock, logger: pino({ level: 'silent' }) });
  return { d: dispatcher, store, seen, now };
}

const spec = (runsOn = ['linux']) =>
  runSpecSchema.parse({ jobs: { one: { runsOn, steps: [{ run: 'true' }] } } });

describe('the syncs of the writes that gate a job start', () => {
  it('a submit an idle agent takes: the job leaves before the commit is synced, the answer after', async () => {
    const { d, store, seen, now } = await setup();
    const a = connectAgent(d, 'idle-held');
    now.assigned = () => a.assigned().length;
    const from = seen.length;
    const { jobs } = await d.submit(spec()).finally(() => (now.answered = true));
    const during = seen.slice(from);
    expect(during.length).toBeGreaterThan(0);
    // No sync before the job was sent; the one that makes the run durable came before the answer.
    expect(during.every((s) => s.assigned === 1)).toBe(true);
    expect(during.some((s) => !s.answered)).toBe(true);
    const row = await store.jobs.get(jobs[0]!.id);
    expect([row?.state, row?.agent_id]).toEqual(['dispatched', 'idle-held']);
  });

  it("a pass's claim: the job leaves before the claim's commit is synced", async () => {
    const { d, store, seen, now } = await setup();
    const { jobs } = await d.submit(spec(['linux', 'later']));
    expect((await store.jobs.get(jobs[0]!.id))?.state).toBe('queued');
    const a = connectAgent(d, 'later-held', ['linux', 'later']);
    now.assigned = () => a.assigned().length;
    const from = seen.length;
    await d.requestPump();
    expect(a.assigned()).toEqual([jobs[0]!.id]);
    const during = seen.slice(from);
    expect(during.length).toBeGreaterThan(0);
    expect(during.every((s) => s.assigned === 1)).toBe(true);
  });

  it('a submit whose held sync the disk refuses is not answered as stored, and the store takes no more writes', async () => {
    const { d, store, now } = await setup();
    const a = connectAgent(d, 'idle-refused');
    now.broken = true;
    await expect(d.submit(spec())).rejects.toThrow(/EIO/);
    // The job had left (its agent is told to stop it when it reports a job the store never kept).
    expect(a.assigned()).toHaveLength(1);
    now.broken = false;
    // The disk answers again, but what the failed sync was for may be gone: nothing more is stored.
    await expect(store.jobs.insertRun({ id: 'r-after', name: null }, [], new Date())).rejects.toThrow();
  });
});
