import { Writable } from 'node:stream';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { Dispatcher } from '../../../src/dispatch/dispatcher.js';
import { createHttpApi } from '../../../src/server/http-api.js';
import { Metrics } from '../../../src/server/metrics.js';
import { StoreProbe } from '../../../src/server/readiness.js';
import { systemClock } from '../../../src/util/clock.js';
import { freshStore } from '../../helpers/data-dir.js';

/** A store that fails under the API: every 500 is logged, the client gets a generic message. */
describe('HTTP API when the store fails', () => {
  it('answers a generic 500, logs it, and /readyz says store-unwritable', async () => {
    const { store, db, close } = await freshStore();
    const records: { msg: string; err?: string; level: number }[] = [];
    const logger = pino(
      { level: 'info' },
      new Writable({
        write(chunk: Buffer, _enc, cb) {
          records.push(JSON.parse(String(chunk)) as { msg: string; level: number });
          cb();
        },
      }),
    );
    const dispatcher = new Dispatcher({ store, clock: systemClock, logger: pino({ level: 'silent' }) });
    const probe = new StoreProbe(db.db, [], logger);
    const app = createHttpApi({
      instanceId: 'test',
      store,
      dispatcher,
      clock: systemClock,
      metrics: new Metrics(),
      isReady: () => true,
      logger,
      readiness: probe,
      reloadScaler: async () => ({ result: 'not-configured' }),
    });
    const { token } = await store.accessTokens.create({ name: 'ops', role: 'viewer', now: new Date() });
    expect((await app.request('/readyz')).status).toBe(200);
    await db.close();
    const res = await app.request('/api/v1/jobs', { headers: { authorization: `Bearer ${token}` } });
    expect(res.status).toBe(500);
    expect(await res.json()).toEqual({
      error: 'internal error',
      problems: ['the server could not complete the request; see its log'],
    });
    const logged = records.find((r) => r.msg === 'HTTP request failed with a 500');
    expect(logged?.level).toBe(50);
    expect(logged?.err).toBeTruthy();
    await new Promise((r) => setTimeout(r, 1100)); // the on-demand probe runs at most once a second
    const ready = await app.request('/readyz');
    expect(ready.status).toBe(503);
    expect(((await ready.json()) as { status: string }).status).toBe('store-unwritable');
    expect(records.some((r) => r.msg.startsWith('the store cannot write'))).toBe(true);
    await close().catch(() => {});
  });
});
