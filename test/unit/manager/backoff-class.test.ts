/**
 * The backoff is keyed by the failure class. A deterministic failure (the same launch will fail the
 * same way) defers the label set 30 s, 60 s, 120 s …; a transient one is retried at once and never
 * blocks the label set, its reason still shown on the waiting job. Past `maxConsecutiveFailures`
 * failures in a row the label set is "failing consistently": logged once per streak, and from then
 * on transient failures defer too (the retry budget is spent). Everything runs on a ManualClock, so
 * every retry time is exact.
 */
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { backoffKey } from '../../../src/scaler/core/backoff.js';
import { DeterministicSpawnError } from '../../../src/scaler/core/spawn-errors.js';
import type { ScaleJob } from '../../../src/scaler/types.js';
import type { Logger } from '../../../src/util/logger.js';
import { useManagerHarnesses, type ManagerHarness } from '../../helpers/manager-harness.js';
import { bareMetal } from '../../helpers/scaler-config.js';

const hs = useManagerHarnesses();
const config = { version: 1, scalers: [bareMetal('alpha', [['linux']])] };
const KEY = backoffKey('alpha', 'linux');

const transient = () => Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' });
const missing = () =>
  new DeterministicSpawnError('binary-missing', 'agent binary /opt/kici/agent does not exist');

/** A logger whose records the test can read. */
function capture(): { logger: Logger; records: { level: number; msg: string }[] } {
  const records: { level: number; msg: string }[] = [];
  const logger: Logger = pino(
    { level: 'info' },
    { write: (line: string) => void records.push(JSON.parse(line)) },
  );
  return { logger, records };
}

/** Fail the one spawn in flight on alpha. */
async function failPending(h: ManagerHarness, err: unknown): Promise<string> {
  const b = h.backend('alpha');
  const [id] = b.pendingIds();
  if (!id) throw new Error('no spawn in flight');
  b.failSpawn(id, err);
  await h.settle();
  return id;
}

describe('backoff by failure class', () => {
  it('a transient failure followed by a success never blocks the label set', async () => {
    const h = await hs.make({ config });
    const { byName } = await h.submit({ a: { runsOn: ['linux'] } });
    const b = h.backend('alpha');
    expect(b.spawns).toHaveLength(1);
    await failPending(h, transient());

    // Not held at any moment: the backoff says so, and so does the decision for another job.
    expect(h.manager.backoff.check(KEY, h.clock.now())).toEqual({ blocked: false });
    const other: ScaleJob = { id: 'other', runId: 'r', runsOn: ['linux'] };
    expect(h.manager.decideNow(other).action).toBe('spawn');
    // The reason is still on the waiting job.
    expect(h.d.queue.get(byName.a!)?.waiting).toMatch(/^transient: ECONNRESET/);
    expect((await h.store.jobs.get(byName.a!))?.last_provisioning_error).toMatch(/^transient:/);

    // Retried as soon as the capacity-freed debounce ends, not 30 s later.
    const failedAt = h.clock.now();
    await h.advance(25);
    expect(b.spawns).toHaveLength(2);
    expect(b.spawns[1]!.boundJobId).toBe(byName.a);
    expect(h.clock.now() - failedAt).toBe(25);

    b.resolveSpawn(b.spawns[1]!.agentId);
    await h.settle();
    expect((await h.registerAgent(b.spawns[1]!.agentId)).ok).toBe(true);
    expect(h.assigned(b.spawns[1]!.agentId)).toEqual([byName.a]);
    expect(h.manager.backoff.snapshot()).toEqual([]);
    expect(h.manager.decideNow(other).action).toBe('spawn');
  });

  it('three deterministic failures defer the label set exactly 30 s, 60 s and 120 s', async () => {
    const h = await hs.make({ config });
    await h.submit({ a: { runsOn: ['linux'] } });
    const b = h.backend('alpha');
    const retryGaps: number[] = [];
    for (let n = 0; n < 3; n++) {
      await failPending(h, missing());
      const failedAt = h.clock.now();
      const spawns = b.spawns.length;
      const held = h.manager.backoff.check(KEY, failedAt);
      expect(held.blocked && held.retryAfterMs).toBe(30_000 * 2 ** n);
      // The periodic sweep finds it held up to the last millisecond, and retries exactly then.
      await h.advance(30_000 * 2 ** n - 1);
      await h.sweep();
      expect(b.spawns).toHaveLength(spawns);
      await h.advance(1);
      await h.sweep();
      expect(b.spawns).toHaveLength(spawns + 1);
      retryGaps.push(h.clock.now() - failedAt);
    }
    expect(retryGaps).toEqual([30_000, 60_000, 120_000]);
  });

  it('a transient failure between deterministic ones neither defers nor resets the schedule', async () => {
    const h = await hs.make({ config });
    await h.submit({ a: { runsOn: ['linux'] } });
    await failPending(h, missing());
    await h.advance(30_000);
    await h.sweep();
    await failPending(h, transient());
    expect(h.manager.backoff.check(KEY, h.clock.now())).toEqual({ blocked: false });
    await h.advance(25);
    await failPending(h, missing());
    // The second deferral of the streak: 60 s.
    const held = h.manager.backoff.check(KEY, h.clock.now());
    expect(held.blocked && held.retryAfterMs).toBe(60_000);
  });

  it('logs "failing consistently" once per streak; past the budget transient failures defer too', async () => {
    const { logger, records } = capture();
    const h = await hs.make({ config, logger });
    await h.submit({ a: { runsOn: ['linux'] } });
    const consistent = () => records.filter((r) => r.msg.includes('failing consistently'));
    // Four transient failures in a row: each retried after the 25 ms debounce, never deferred.
    for (let n = 1; n <= 4; n++) {
      await failPending(h, transient());
      expect(h.manager.backoff.check(KEY, h.clock.now())).toEqual({ blocked: false });
      await h.advance(25);
    }
    expect(consistent()).toEqual([]);
    // The fifth spends the retry budget: logged once, and the label set now waits 30 s.
    await failPending(h, transient());
    expect(consistent()).toHaveLength(1);
    expect(consistent()[0]!.msg).toMatch(/alpha.*\[linux\].*5 spawn failures in a row.*transient/);
    const held = h.manager.backoff.check(KEY, h.clock.now());
    expect(held.blocked && held.retryAfterMs).toBe(30_000);
    // Further failures in the same streak do not log it again.
    await h.advance(30_000);
    await h.sweep();
    await failPending(h, transient());
    expect(consistent()).toHaveLength(1);
    // A success ends the streak; a new streak of five logs once more.
    await h.advance(60_000);
    await h.sweep();
    const b = h.backend('alpha');
    const ok = b.pendingIds()[0]!;
    b.resolveSpawn(ok);
    await h.settle();
    expect((await h.registerAgent(ok)).ok).toBe(true);
    expect(h.manager.backoff.snapshot()).toEqual([]);
    await h.finishJob(ok, h.assigned(ok)[0]!);
    await h.disconnect(ok);
    await h.submit({ b: { runsOn: ['linux'] } });
    for (let n = 1; n <= 5; n++) {
      await failPending(h, transient());
      await h.advance(25);
    }
    expect(consistent()).toHaveLength(2);
  });
});
