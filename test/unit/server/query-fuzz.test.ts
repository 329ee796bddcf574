import fc from 'fast-check';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Dispatcher } from '../../../src/dispatch/dispatcher.js';
import { createHttpApi } from '../../../src/server/http-api.js';
import { Metrics } from '../../../src/server/metrics.js';
import { RetentionService } from '../../../src/server/retention.js';
import { retentionFromSettings } from '../../../src/store/retention/policy.js';
import { systemClock } from '../../../src/util/clock.js';
import { freshStore } from '../../helpers/data-dir.js';

/**
 * No query string gets a 500 from any GET route: every parameter a route reads is judged (400 naming
 * it) or ignored. The routes come from the app itself, so a new one is fuzzed too.
 */

let app: ReturnType<typeof createHttpApi>;
let close: () => Promise<void>;
let token = '';

beforeAll(async () => {
  const s = await freshStore();
  close = s.close;
  ({ token } = await s.store.accessTokens.create({ name: 'fuzz', role: 'admin', now: new Date() }));
  const logger = pino({ level: 'silent' });
  const dispatcher = new Dispatcher({ store: s.store, clock: systemClock, logger });
  const metrics = new Metrics();
  app = createHttpApi({
    instanceId: 'test',
    retention: new RetentionService(
      s.db.db,
      s.db.engine,
      retentionFromSettings({}),
      () => Date.now(),
      metrics,
      logger,
    ),
    store: s.store,
    dispatcher,
    clock: systemClock,
    metrics,
    isReady: () => true,
    logger,
    reloadScaler: async () => ({ result: 'not-configured' }),
  });
});
afterAll(async () => close?.());

/** Names routes read, and some they do not. */
const KEYS = ['name', 'scaler', 'state', 'limit', 'runId', 'after', 'all', 'dryRun', 'x', ''];

/** A query value as it appears on the wire: raw characters, percent escapes (valid or not), NULs. */
const wireText = fc
  .array(
    fc.oneof(
      fc.string({ maxLength: 8 }).map(encodeURIComponent),
      fc.constantFrom('%00', '%', '%zz', '%C0%80', '%ED%A0%80', '%FF', '+', '%25', '%2F', '%0A'),
      fc.constantFrom('%00', 'kici.scaler.scale-up', 'queued', '10', 'true'),
      fc.string({ unit: 'binary', maxLength: 4 }).map(encodeURIComponent),
      fc.bigInt({ min: -(10n ** 30n), max: 10n ** 30n }).map(String),
    ),
    { maxLength: 6 },
  )
  .map((parts) => parts.join(''));

/** Each name present or not, in any order, some twice. */
const query = fc
  .tuple(
    fc.uniqueArray(fc.constantFrom(...KEYS), { maxLength: KEYS.length }),
    fc.array(wireText, { minLength: KEYS.length, maxLength: KEYS.length }),
    fc.boolean(),
  )
  .map(([keys, values, twice]) => {
    const pairs = keys.map((k, i) => `${k}=${values[i]}`);
    return (twice && pairs.length ? [...pairs, pairs[0]] : pairs).join('&');
  });

function getRoutes(): string[] {
  const paths = app.routes.filter((r) => r.method === 'GET').map((r) => r.path);
  // Path parameters get a well-formed id; the query is what is fuzzed here.
  return [...new Set(paths)].map((p) => p.replace(/:[A-Za-z]+/g, 'j-000000000000'));
}

describe('GET routes and their query parameters', () => {
  it('there are GET routes to fuzz', () => {
    expect(getRoutes()).toEqual(expect.arrayContaining(['/api/v1/jobs', '/api/v1/events']));
  });

  it('never answer 500, whatever the query', async () => {
    for (const path of getRoutes())
      await fc.assert(
        fc.asyncProperty(query, async (q) => {
          const res = await app.request(`${path}?${q}`, { headers: { authorization: `Bearer ${token}` } });
          expect(res.status, `${path}?${q}`).toBeLessThan(500);
        }),
        { numRuns: 150 },
      );
  });

  it('the cases that answered 500 before: a NUL in an event name', async () => {
    const res = await app.request('/api/v1/events?name=%00', {
      headers: { authorization: `Bearer ${token}` },
    });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { problems: string[] }).problems[0]).toMatch(/^name: /);
  });
});
