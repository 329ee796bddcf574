/** `/metrics` needs a viewer token unless the server was started with --metrics-public. */
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { metricsPublicFrom } from '../../../src/cli/serve.js';
import { Dispatcher } from '../../../src/dispatch/dispatcher.js';
import { createHttpApi } from '../../../src/server/http-api.js';
import { Metrics } from '../../../src/server/metrics.js';
import { tlsFilesFrom } from '../../../src/server/tls.js';
import { systemClock } from '../../../src/util/clock.js';
import { freshStore } from '../../helpers/data-dir.js';

let close: (() => Promise<void>) | undefined;
afterEach(async () => {
  await close?.();
  close = undefined;
});

async function api(metricsPublic: boolean) {
  const fresh = await freshStore();
  close = fresh.close;
  const logger = pino({ level: 'silent' });
  const app = createHttpApi({
    instanceId: 'test',
    store: fresh.store,
    dispatcher: new Dispatcher({ store: fresh.store, clock: systemClock, logger }),
    clock: systemClock,
    metrics: new Metrics(),
    metricsPublic,
    isReady: () => true,
    logger,
    reloadScaler: async () => ({ result: 'not-configured' }),
  });
  return { app, store: fresh.store };
}

describe('/metrics access', () => {
  it('refuses a scrape without a token, and takes a viewer token', async () => {
    const { app, store } = await api(false);
    expect((await app.request('/metrics')).status).toBe(401);
    const { token } = await store.accessTokens.create({ name: 'prom', role: 'viewer', now: new Date() });
    const ok = await app.request('/metrics', { headers: { authorization: `Bearer ${token}` } });
    expect(ok.status).toBe(200);
    expect(await ok.text()).toContain('kici_orch_agent_tokens_expiring 0');
    // The refusal is in the audit trail.
    const rows = await store.audit.list();
    expect(rows.map((r) => [r.action, r.result, r.status])).toEqual([['metrics.scrape', 'denied', 401]]);
  });

  it('answers without a token when public; the API still needs one', async () => {
    const { app } = await api(true);
    expect((await app.request('/metrics')).status).toBe(200);
    expect((await app.request('/api/v1/jobs')).status).toBe(401);
  });

  it('reads the flag and KICI_METRICS_PUBLIC, naming a bad value', () => {
    expect(metricsPublicFrom(undefined, undefined)).toBe(false);
    expect(metricsPublicFrom(true, undefined)).toBe(true);
    expect(metricsPublicFrom(undefined, 'true')).toBe(true);
    expect(metricsPublicFrom(undefined, '0')).toBe(false);
    expect(() => metricsPublicFrom(undefined, 'yes please')).toThrow(/KICI_METRICS_PUBLIC/);
  });

  it('needs both TLS files or neither', () => {
    expect(tlsFilesFrom(undefined, undefined)).toBeUndefined();
    expect(tlsFilesFrom('c.pem', 'k.pem')).toEqual({ certPath: 'c.pem', keyPath: 'k.pem' });
    expect(() => tlsFilesFrom('c.pem', undefined)).toThrow(/both --tls-cert and --tls-key/);
  });
});
