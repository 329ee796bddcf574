/**
 * Dispatcher timers on the clock: the job-timeout backstop and the orphan expiry run on the
 * injected Clock, so a ManualClock drives them to the millisecond. A real Dispatcher on the real
 * PGlite store, with a hand-driven static agent.
 */
import { sql } from 'kysely';
import { pino } from 'pino';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { newConnectedAgent } from '../../../src/dispatch/agent-registry.js';
import { Dispatcher } from '../../../src/dispatch/dispatcher.js';
import { runSpecSchema } from '../../../src/jobs/run-spec.js';
import type { OrchestratorMessage } from '../../../src/protocol/messages.js';
import type { Store } from '../../../src/store/index.js';
import { ManualClock } from '../../../src/util/clock.js';
import { MAX_TIMER_MS } from '../../../src/util/long-timer.js';
import { freshStore } from '../../helpers/data-dir.js';
import { wipeStore } from '../../helpers/store-per-file.js';

let fresh: Awaited<ReturnType<typeof freshStore>>;
beforeAll(async () => {
  fresh = await freshStore();
}, 60_000);
afterAll(async () => {
  await fresh.close();
});
const stops: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const s of stops.splice(0)) await s();
  live.length = 0;
  await wipeStore(fresh.store);
});

const BACKSTOP_MS = 5_000;
/** Dispatchers of the current test: their group-committed writes run on real timers, not the clock. */
const live: Dispatcher[] = [];
const GRACE_MS = 10_000;

function setup(store: Store = fresh.store, clock = new ManualClock()) {
  const d = new Dispatcher({
    store,
    clock,
    logger: pino({ level: 'silent' }),
    timeoutBackstopMs: BACKSTOP_MS,
    reconnectGraceMs: GRACE_MS,
  });
  stops.push(() => d.stop());
  live.push(d);
  return { d, clock };
}

/** A static agent the test drives by hand; it records what the dispatcher sends it. */
function connect(d: Dispatcher, clock: ManualClock, id = 'static-1') {
  const messages: OrchestratorMessage[] = [];
  const agent = newConnectedAgent({
    id,
    labels: ['linux'],
    scaled: null,
    nowMs: clock.now(),
    send: (m) => void messages.push(m),
    close: () => {},
  });
  d.registry.add(agent);
  // It holds a live static token: while it is away its jobs wait for it instead of failing.
  d.noteStaticToken(id, ['linux'], null);
  return { agent, messages };
}

async function submit(d: Dispatcher, job: Record<string, unknown> = {}): Promise<string> {
  const spec = runSpecSchema.parse({ jobs: { a: { runsOn: ['linux'], steps: [{ run: 'true' }], ...job } } });
  const r = await d.submit(spec);
  await d.requestPump();
  return r.jobs[0]!.id;
}

/** Let the writes a timer started reach the store (its one connection runs queries in order). */
async function settle(store: Store = fresh.store): Promise<void> {
  for (let i = 0; i < 20; i++) {
    await new Promise<void>((r) => setImmediate(r));
    for (const d of live) await d.writes.flush();
    await sql`select 1`.execute(store.db);
  }
}

const stateOf = async (id: string, store: Store = fresh.store) => (await store.jobs.get(id))?.state;

describe('dispatcher timers on the injected clock', () => {
  it('the timeout backstop settles a running job exactly at timeout + backstop and cancels it on the agent', async () => {
    const { d, clock } = setup();
    const { messages } = connect(d, clock);
    const id = await submit(d, { timeoutSeconds: 60 });
    await d.active.onJobStarted('static-1', id);
    clock.advance(60_000 + BACKSTOP_MS - 1);
    await settle();
    expect(await stateOf(id)).toBe('running');
    clock.advance(1);
    await settle();
    expect(await stateOf(id)).toBe('timed-out');
    expect((await fresh.store.jobs.get(id))?.reason).toBe('job exceeded its 60s timeout');
    expect(messages.at(-1)).toEqual({
      type: 'job.cancel',
      jobId: id,
      reason: 'job exceeded its 60s timeout',
    });
    expect(d.active.size).toBe(0);
    expect(clock.pendingTimers()).toBe(0);
  });

  it('a timeout longer than one Node timer still fires at its time, not at once', async () => {
    const { d, clock } = setup();
    connect(d, clock);
    // Thirty days: over 2^31-1 ms, which a single Node timer would clamp to 1 ms.
    const seconds = 30 * 24 * 3600;
    expect(seconds * 1000).toBeGreaterThan(MAX_TIMER_MS);
    const id = await submit(d, { timeoutSeconds: seconds });
    await d.active.onJobStarted('static-1', id);
    clock.advance(1);
    await settle();
    expect(await stateOf(id)).toBe('running');
    clock.advance(seconds * 1000 + BACKSTOP_MS - 2);
    await settle();
    expect(await stateOf(id)).toBe('running');
    clock.advance(1);
    await settle();
    expect(await stateOf(id)).toBe('timed-out');
  });

  it('a job that finishes in time leaves no timer behind', async () => {
    const { d, clock } = setup();
    connect(d, clock);
    const id = await submit(d, { timeoutSeconds: 60 });
    expect(clock.pendingTimers()).toBe(1);
    await d.active.onJobStarted('static-1', id);
    await d.active.onJobFinished('static-1', id, 'succeeded', 0);
    expect(await stateOf(id)).toBe('succeeded');
    expect(clock.pendingTimers()).toBe(0);
  });

  it('orphan expiry requeues a dispatched job exactly when the grace ends', async () => {
    const { d, clock } = setup();
    connect(d, clock);
    const id = await submit(d);
    const a = d.active.get(id)!;
    expect(a.state).toBe('dispatched');
    d.registry.remove('static-1', d.registry.get('static-1')!);
    d.active.orphan(a, 'agent disconnected');
    clock.advance(GRACE_MS - 1);
    await settle();
    expect(d.active.get(id)).toBe(a);
    clock.advance(1);
    await settle();
    expect(await stateOf(id)).toBe('queued');
    expect(d.queue.get(id)).toBeDefined();
    expect(d.active.has(id)).toBe(false);
  });

  it('orphan expiry fails a running job, and a reattach before it cancels the expiry', async () => {
    const { d, clock } = setup();
    connect(d, clock);
    const first = await submit(d);
    await d.active.onJobStarted('static-1', first);
    const a = d.active.get(first)!;
    // The agent comes back in time: what agent-socket's reattach does.
    d.active.orphan(a, 'agent disconnected', 3_000);
    clock.advance(2_000);
    a.orphanTimer?.cancel();
    a.orphanTimer = undefined;
    clock.advance(5_000);
    await settle();
    expect(await stateOf(first)).toBe('running');
    // Away again, and this time for good.
    d.active.orphan(a, 'agent disconnected', 3_000);
    clock.advance(3_000);
    await settle();
    expect(await stateOf(first)).toBe('failed');
    expect((await fresh.store.jobs.get(first))?.reason).toBe(
      'agent disconnected; agent static-1 did not come back; the job was running and is not retried',
    );
  });

  it('after a restart, recovered jobs wait the reconnect grace on the clock, then settle', async () => {
    const before = setup();
    connect(before.d, before.clock);
    const running = await submit(before.d, { timeoutSeconds: 3600 });
    await before.d.active.onJobStarted('static-1', running);
    await before.d.stop();
    // A new orchestrator process on the same store.
    const { d, clock } = setup(fresh.store, new ManualClock(before.clock.now() + 1_000));
    expect(await d.recover()).toEqual({ queued: 0, awaiting: 1 });
    expect(clock.pendingTimers()).toBe(2); // the job's timeout and its orphan expiry
    clock.advance(GRACE_MS - 1);
    await settle();
    expect(await stateOf(running)).toBe('running');
    clock.advance(1);
    await settle();
    expect(await stateOf(running)).toBe('failed');
    expect(clock.pendingTimers()).toBe(0);
  });

  it('stop cancels every timer', async () => {
    const { d, clock } = setup();
    connect(d, clock);
    const id = await submit(d, { timeoutSeconds: 60 });
    d.active.orphan(d.active.get(id)!, 'agent disconnected');
    expect(clock.pendingTimers()).toBe(2);
    await d.stop();
    expect(clock.pendingTimers()).toBe(0);
  });
});

describe('dispatcher holding new work (data dir nearly full)', () => {
  it('hands out no queued job while held, and the job goes out on the first pump after', async () => {
    const { d, clock } = setup();
    let held = true;
    d.holdNewWorkWhile(() => held);
    const { messages } = connect(d, clock);
    const id = await submit(d);
    await settle();
    expect(await stateOf(id)).toBe('queued');
    expect(messages.filter((m) => m.type === 'job.assign')).toEqual([]);
    held = false;
    await d.requestPump();
    await settle();
    expect(await stateOf(id)).toBe('dispatched');
    expect(messages.some((m) => m.type === 'job.assign' && m.job.id === id)).toBe(true);
  });
});
