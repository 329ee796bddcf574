/**
 * The data dir's free-space watch, with an injected statfs: below the floor it reports low (and
 * /readyz answers 503 with the reason, new runs are refused); it reports ok again only with the
 * resume margin free, so a disk at the edge does not flap.
 */
import fc from 'fast-check';
import { pino } from 'pino';
import { describe, expect, it, onTestFinished } from 'vitest';
import { Dispatcher } from '../../../src/dispatch/dispatcher.js';
import { Metrics } from '../../../src/server/metrics.js';
import { systemClock } from '../../../src/util/clock.js';
import { freshStore } from '../../helpers/data-dir.js';
import {
  decideLow,
  DiskSpaceWatcher,
  minFreeBytesFromEnv,
  RESUME_MARGIN_BYTES,
} from '../../../src/server/disk-watch.js';
import { createHttpApi } from '../../../src/server/http-api.js';

const MiB = 1024 * 1024;
const log = pino({ level: 'silent' });

function fakeDisk(freeMiB: number) {
  const disk = {
    free: freeMiB * MiB,
    fail: false,
    statfs: async () => {
      if (disk.fail) throw new Error('EIO');
      return { bavail: BigInt(disk.free / 4096), bsize: 4096 };
    },
  };
  return disk;
}

describe('DiskSpaceWatcher', () => {
  it('goes low below the floor, back to ok only above floor + margin, and says why', async () => {
    const disk = fakeDisk(1000);
    const w = new DiskSpaceWatcher('/data', log, 256 * MiB, disk.statfs);
    const changes: boolean[] = [];
    w.whenChanged((low) => changes.push(low));
    expect((await w.check()).ok).toBe(true);
    disk.free = 255 * MiB;
    const low = await w.check();
    expect(low.ok).toBe(false);
    expect(!low.ok && low.problem).toBe(
      'data dir /data has 255 MiB free, below the 256 MiB floor (KICI_DATA_MIN_FREE_MB); new work waits until 320 MiB are free',
    );
    disk.free = 300 * MiB; // above the floor, inside the margin: still low
    expect((await w.check()).ok).toBe(false);
    disk.fail = true; // an unreadable figure changes nothing
    expect((await w.check()).ok).toBe(false);
    disk.fail = false;
    disk.free = 256 * MiB + RESUME_MARGIN_BYTES;
    expect((await w.check()).ok).toBe(true);
    expect(changes).toEqual([true, false]);
  });

  it('never flaps: between two changes the free space crossed the whole margin', () => {
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 0, max: 1000 }), { maxLength: 100 }), (frees) => {
        let low = false;
        for (const f of frees.map((x) => x * MiB)) {
          const next = decideLow(low, f, 256 * MiB);
          if (next !== low) {
            if (next) expect(f).toBeLessThan(256 * MiB);
            else expect(f).toBeGreaterThanOrEqual(256 * MiB + RESUME_MARGIN_BYTES);
          }
          low = next;
        }
      }),
    );
  });

  it('KICI_DATA_MIN_FREE_MB: whole MiB, 0 turns it off, anything else is named', () => {
    expect(minFreeBytesFromEnv({})).toBe(256 * MiB);
    expect(minFreeBytesFromEnv({ KICI_DATA_MIN_FREE_MB: '0' })).toBe(0);
    expect(minFreeBytesFromEnv({ KICI_DATA_MIN_FREE_MB: '64' })).toBe(64 * MiB);
    expect(() => minFreeBytesFromEnv({ KICI_DATA_MIN_FREE_MB: 'lots' })).toThrow(/KICI_DATA_MIN_FREE_MB/);
  });
});

describe('the HTTP surface while the disk is low', () => {
  it('/readyz answers 503 with the reason, new runs are refused, /healthz still answers', async () => {
    const problem = 'data dir /data has 10 MiB free, below the 256 MiB floor';
    const s = await freshStore();
    onTestFinished(() => s.close());
    const { token } = await s.store.accessTokens.create({ name: 'ops', role: 'operator', now: new Date() });
    const app = createHttpApi({
      instanceId: 'test',
      isReady: () => true,
      diskSpace: { verdict: () => ({ ok: false, freeBytes: 10 * MiB, problem }) },
      store: s.store,
      dispatcher: new Dispatcher({ store: s.store, clock: systemClock, logger: log }),
      metrics: new Metrics(),
      clock: systemClock,
      logger: log,
      reloadScaler: async () => ({ result: 'not-configured' }),
    });
    const ready = await app.request('/readyz');
    expect(ready.status).toBe(503);
    expect(await ready.json()).toEqual({ status: 'disk-low', problem });
    expect((await app.request('/healthz')).status).toBe(200);
    const run = await app.request('/api/v1/runs', {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ jobs: { a: { runsOn: ['x'], steps: [{ run: 'true' }] } } }),
    });
    expect(run.status).toBe(503);
    expect(await run.json()).toEqual({ error: 'unavailable', problems: [problem] });
  });
});
