/**
 * The cluster's periodic work (instance heartbeat, leader-only tasks, queue poll) and the
 * orchestrator's own sweeps run on the injected clock: driven by a manual clock, each fires
 * exactly when due, so these tests use no real waiting at all.
 */
import fc from 'fast-check';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { InstancesRepo, type InstanceBeat } from '../../../src/cluster/instances-repo.js';
import { SoleLeader } from '../../../src/cluster/leader-lease.js';
import { LeaderWork } from '../../../src/cluster/leader-work.js';
import { InstancePresence } from '../../../src/cluster/presence.js';
import { QueueSync } from '../../../src/cluster/queue-sync.js';
import { every, ManualClock } from '../../../src/util/clock.js';
import { freshStore } from '../../helpers/data-dir.js';

const log = pino({ level: 'silent' });
/** Let promise callbacks already queued run (a timer's async work started by `advance`). */
const settle = () => new Promise<void>((r) => setImmediate(r));

/** The real repository, counting the beats that reach it. */
class CountingRepo extends InstancesRepo {
  beats = 0;
  override beat(b: InstanceBeat, fresh?: boolean): Promise<void> {
    this.beats++;
    return super.beat(b, fresh);
  }
}

let fresh: Awaited<ReturnType<typeof freshStore>>;
beforeAll(async () => {
  fresh = await freshStore();
});
afterAll(async () => {
  await fresh.close();
});

describe('every()', () => {
  it('fires once per interval elapsed, however the time is stepped, and never after cancel', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 1_000 }),
        fc.array(fc.integer({ min: 0, max: 3_000 }), { maxLength: 20 }),
        fc.integer({ min: 0, max: 5_000 }),
        (ms, steps, after) => {
          const clock = new ManualClock();
          let fired = 0;
          const t = every(clock, ms, () => fired++);
          for (const s of steps) clock.advance(s);
          const total = steps.reduce((a, b) => a + b, 0);
          expect(fired).toBe(Math.floor(total / ms));
          t.cancel();
          clock.advance(after);
          expect(fired).toBe(Math.floor(total / ms));
          expect(clock.pendingTimers()).toBe(0);
        },
      ),
    );
  });

  it('keeps its series going when a run throws', () => {
    const clock = new ManualClock();
    let runs = 0;
    every(clock, 10, () => {
      runs++;
      throw new Error('boom');
    });
    for (let i = 0; i < 3; i++) expect(() => clock.advance(10)).toThrow('boom');
    expect(runs).toBe(3);
  });
});

describe('cluster timers on a manual clock', () => {
  it('the instance heartbeat beats exactly once per interval, and not after stop', async () => {
    const clock = new ManualClock();
    const repo = new CountingRepo(fresh.store.db);
    let agents = 0;
    const facts = {
      address: () => 'http://x:1',
      agentsConnected: () => agents,
      jobsRunning: () => 0,
      isLeader: () => false,
    };
    const p = new InstancePresence(repo, 'orch-clock', '1', 1_000, facts, log, clock);
    await p.start();
    expect(repo.beats).toBe(1);
    agents = 4;
    clock.advance(999);
    expect(repo.beats).toBe(1);
    clock.advance(1);
    expect(repo.beats).toBe(2);
    await p.beat(); // the beat in flight (coalesced), not a new one
    expect(repo.beats).toBe(2);
    expect((await repo.list()).find((r) => r.id === 'orch-clock')!.agentsConnected).toBe(4);
    for (let i = 0; i < 3; i++) {
      clock.advance(1_000);
      await p.beat(); // waits for the timer's beat, which is still in flight
    }
    expect(repo.beats).toBe(5);
    await p.stop();
    clock.advance(10_000);
    expect(repo.beats).toBe(5);
  });

  it('leader tasks run at once on gaining the lease, then per interval, and stop with it', async () => {
    const clock = new ManualClock();
    const lease = new SoleLeader();
    const runs: number[] = [];
    const work = new LeaderWork(
      lease,
      [{ name: 'tick', intervalMs: 500, run: () => Promise.resolve(void runs.push(clock.monotonic())) }],
      log,
      clock,
    );
    const t0 = clock.monotonic();
    lease.start();
    await settle();
    for (let i = 0; i < 4; i++) {
      clock.advance(500);
      await settle();
    }
    expect(runs.map((t) => t - t0)).toEqual([0, 500, 1_000, 1_500, 2_000]);
    await lease.stop();
    clock.advance(5_000);
    await settle();
    expect(runs).toHaveLength(5);
    await work.stop();
  });

  it('a leader task still running is not started twice when its interval comes round', async () => {
    const clock = new ManualClock();
    const lease = new SoleLeader();
    let started = 0;
    let release!: () => void;
    const work = new LeaderWork(
      lease,
      [{ name: 'slow', intervalMs: 100, run: () => new Promise<void>((r) => ((release = r), started++)) }],
      log,
      clock,
    );
    lease.start();
    clock.advance(1_000);
    expect(started).toBe(1);
    release();
    await settle();
    clock.advance(100);
    expect(started).toBe(2);
    release();
    await work.stop();
  });

  it('the queue poll re-reads once per interval without a LISTEN connection', async () => {
    const clock = new ManualClock();
    let reads = 0;
    const sync = new QueueSync({
      url: undefined,
      resync: () => Promise.resolve(void reads++),
      pollMs: 250,
      log,
      clock,
    });
    sync.start();
    clock.advance(249);
    expect(reads).toBe(0);
    clock.advance(1);
    await settle();
    expect(reads).toBe(1);
    clock.advance(500);
    await settle();
    expect(reads).toBe(3);
    await sync.stop();
    clock.advance(1_000);
    await settle();
    expect(reads).toBe(3);
  });
});
