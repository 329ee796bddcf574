/**
 * `reset-backoff` across instances, on the real store: the order one instance writes is applied by
 * every instance that catches up, once each, to its own backoff memory; the answer lists what each
 * instance lifted; an instance started later does not replay old orders.
 */
import { sql } from 'kysely';
import { pino } from 'pino';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { BackoffResetFanout, type BackoffResetOrder } from '../../../src/cluster/backoff-resets.js';
import { backoffKey, ProvisionBackoff } from '../../../src/scaler/core/backoff.js';
import { freshStore } from '../../helpers/data-dir.js';

let fresh: Awaited<ReturnType<typeof freshStore>>;
beforeAll(async () => {
  fresh = await freshStore();
}, 60_000);
afterAll(async () => {
  await fresh.close();
});
afterEach(async () => {
  await sql`delete from kici_backoff_resets`.execute(fresh.store.db);
  await sql`delete from kici_backoff_reset_results`.execute(fresh.store.db);
});

const log = pino({ level: 'silent' });
const SMALL = backoffKey('bm', 'linux,small');
const BIG = backoffKey('bm', 'linux,big');

/** One instance: its own backoff memory, and the orders it applied. */
function instance(id: string, peers: () => Promise<string[]> = async () => [], waitMs?: number) {
  const backoff = new ProvisionBackoff();
  const applied: BackoffResetOrder[] = [];
  const fanout = new BackoffResetFanout(
    fresh.store.db,
    id,
    (order) => {
      applied.push(order);
      const { atMs, requestedBy, via } = order;
      return backoff.clear(order.scaler, order.labelSet, { by: 'operator', atMs, requestedBy, via });
    },
    peers,
    log,
    waitMs,
  );
  return { id, backoff, applied, fanout };
}

const arm = (b: ProvisionBackoff, key: string) => b.recordFailure(key, 1_000, undefined, undefined);

describe('cluster backoff reset', () => {
  it('a reset sent to instance A lifts the backoff armed on instance B, once, and says who asked', async () => {
    const b = instance('orch-b');
    // The live peer list is read after the order is written: B catching up there stands for B
    // waking on the order's notification, so A's wait sees B's answer.
    const a = instance('orch-a', async () => {
      await b.fanout.catchUp();
      return ['orch-b'];
    });
    await a.fanout.init();
    await b.fanout.init();
    arm(b.backoff, SMALL);
    arm(b.backoff, BIG);
    expect(b.backoff.check(SMALL, 2_000).blocked).toBe(true);

    const r = await a.fanout.request({
      scaler: 'bm',
      labelSet: 'linux,small',
      requestedBy: 'ops',
      atMs: 5_000,
    });
    expect(r.instances).toEqual([
      { instance: 'orch-a', answered: true, cleared: [] },
      { instance: 'orch-b', answered: true, cleared: ['linux,small'] },
    ]);
    expect(b.backoff.check(SMALL, 2_000).blocked).toBe(false);
    // Only the label set named.
    expect(b.backoff.check(BIG, 2_000).blocked).toBe(true);
    expect(b.backoff.liftHistory()).toEqual([
      {
        scalerName: 'bm',
        labelSetKey: 'linux,small',
        by: 'operator',
        atMs: 5_000,
        consecutive: 1,
        requestedBy: 'ops',
        via: 'orch-a',
      },
    ]);

    // Applied once: catching up again (a poll, a second notification) changes nothing.
    arm(b.backoff, SMALL);
    await b.fanout.catchUp();
    await a.fanout.catchUp();
    expect(b.applied).toHaveLength(1);
    expect(a.applied).toHaveLength(1);
    expect(b.backoff.check(SMALL, 2_000).blocked).toBe(true);
  });

  it('without a label set, every one of the scaler; another scaler keeps its backoff', async () => {
    const a = instance('orch-a');
    await a.fanout.init();
    arm(a.backoff, SMALL);
    arm(a.backoff, BIG);
    const other = backoffKey('other', 'linux,small');
    arm(a.backoff, other);
    const r = await a.fanout.request({ scaler: 'bm', requestedBy: null, atMs: 1 });
    expect(r.local.sort()).toEqual(['linux,big', 'linux,small']);
    expect(a.backoff.check(other, 2_000).blocked).toBe(true);
  });

  it('a peer that does not answer in time is reported so, and lifts its backoff when it catches up', async () => {
    const late = instance('orch-c');
    await late.fanout.init();
    arm(late.backoff, SMALL);
    const a = instance('orch-a', async () => ['orch-c'], 1);
    await a.fanout.init();
    const r = await a.fanout.request({ scaler: 'bm', requestedBy: 'ops', atMs: 1 });
    expect(r.instances).toEqual([
      { instance: 'orch-a', answered: true, cleared: [] },
      { instance: 'orch-c', answered: false, cleared: [] },
    ]);
    await late.fanout.catchUp();
    expect(late.backoff.check(SMALL, 2_000).blocked).toBe(false);
  });

  it('an instance started after an order does not replay it', async () => {
    const a = instance('orch-a');
    await a.fanout.init();
    await a.fanout.request({ scaler: 'bm', requestedBy: 'ops', atMs: 1 });
    const fresh = instance('orch-new');
    await fresh.fanout.init();
    arm(fresh.backoff, SMALL);
    await fresh.fanout.catchUp();
    expect(fresh.applied).toEqual([]);
    expect(fresh.backoff.check(SMALL, 2_000).blocked).toBe(true);
  });
});
