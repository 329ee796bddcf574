import fc from 'fast-check';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Dispatcher } from '../../../src/dispatch/dispatcher.js';
import { MAX_ARG_BYTES, MAX_STEP_TOTAL_BYTES } from '../../../src/jobs/run-limits.js';
import { parseRunSpec } from '../../../src/jobs/run-spec.js';
import { createHttpApi } from '../../../src/server/http-api.js';
import { Metrics } from '../../../src/server/metrics.js';
import { systemClock } from '../../../src/util/clock.js';
import { freshStore } from '../../helpers/data-dir.js';

/** Input judged at the door: what could never run is a 400 naming the field, not a job that waits. */

let app: ReturnType<typeof createHttpApi>;
let close: () => Promise<void>;
const auth = { authorization: '', 'content-type': 'application/json' };

beforeAll(async () => {
  const s = await freshStore();
  close = s.close;
  const { token } = await s.store.accessTokens.create({ name: 'ops', role: 'admin', now: new Date() });
  auth.authorization = `Bearer ${token}`;
  const logger = pino({ level: 'silent' });
  app = createHttpApi({
    instanceId: 'test',
    store: s.store,
    dispatcher: new Dispatcher({ store: s.store, clock: systemClock, logger }),
    clock: systemClock,
    metrics: new Metrics(),
    isReady: () => true,
    logger,
    reloadScaler: async () => ({ result: 'not-configured' }),
  });
});
afterAll(async () => close?.());

async function post(path: string, body: unknown): Promise<{ status: number; problems: string[] }> {
  const res = await app.request(path, { method: 'POST', headers: auth, body: JSON.stringify(body) });
  const json = (await res.json()) as { problems?: string[] };
  return { status: res.status, problems: json.problems ?? [] };
}

const job = (over: Record<string, unknown>) => ({
  jobs: { a: { runsOn: ['linux'], steps: [{ run: 'true' }], ...over } },
});

describe('POST /api/v1/runs refuses what could never run', () => {
  it('memory no machine has', async () => {
    const r = await post(
      '/api/v1/runs',
      job({ resources: { requests: { memory: '99999999999999999999999g' } } }),
    );
    expect(r.status).toBe(400);
    expect(r.problems[0]).toMatch(/^jobs\.a\.resources\.requests\.memory: at most \d+g/);
    expect((await post('/api/v1/runs', job({ resources: { requests: { memory: '64g' } } }))).status).toBe(
      201,
    );
  });

  it('a step command larger than one exec argument', async () => {
    const r = await post('/api/v1/runs', job({ steps: [{ run: 'x'.repeat(MAX_ARG_BYTES + 1) }] }));
    expect(r.status).toBe(400);
    expect(r.problems[0]).toMatch(/^jobs\.a\.steps\[0\]\.run: \d+ bytes; .*E2BIG/);
    expect((await post('/api/v1/runs', job({ steps: [{ run: 'x'.repeat(MAX_ARG_BYTES) }] }))).status).toBe(
      201,
    );
  });

  it('an environment variable, or a step with its environment, too large', async () => {
    const big = { BIG: 'x'.repeat(MAX_ARG_BYTES) };
    const r = await post('/api/v1/runs', job({ env: big }));
    expect(r.status).toBe(400);
    expect(r.problems[0]).toMatch(/^jobs\.a\.env\.BIG: /);
    const many = Object.fromEntries(Array.from({ length: 10 }, (_, i) => [`V${i}`, 'y'.repeat(120_000)]));
    const t = await post('/api/v1/runs', job({ env: many }));
    expect(t.status).toBe(400);
    expect(t.problems[0]).toMatch(new RegExp(`^jobs\\.a\\.steps\\[0\\]: .*at most ${MAX_STEP_TOTAL_BYTES}`));
  });

  it('more runsOn labels than an agent can have', async () => {
    const labels = (n: number) => Array.from({ length: n }, (_, i) => `l${i}`);
    const r = await post('/api/v1/runs', job({ runsOn: labels(65) }));
    expect(r.status).toBe(400);
    expect(r.problems[0]).toMatch(/^jobs\.a\.runsOn: at most 64 labels/);
    expect((await post('/api/v1/runs', job({ runsOn: labels(64) }))).status).toBe(201);
  });

  it('property: a step is accepted exactly when each string fits and the total fits', () => {
    fc.assert(
      fc.property(
        fc.nat({ max: 2 * MAX_ARG_BYTES }),
        fc.array(fc.nat({ max: 2 * MAX_ARG_BYTES }), { maxLength: 12 }),
        (runLen, envLens) => {
          const env = Object.fromEntries(envLens.map((n, i) => [`E${i}`, 'v'.repeat(n)]));
          const res = parseRunSpec(job({ env, steps: [{ run: 'r'.repeat(runLen + 1) }] }));
          const envSizes = envLens.map((n, i) => `E${i}`.length + 1 + n);
          const fits =
            runLen + 1 <= MAX_ARG_BYTES &&
            envSizes.every((n) => n <= MAX_ARG_BYTES) &&
            runLen + 1 + envSizes.reduce((a, n) => a + n + 1, 0) <= MAX_STEP_TOTAL_BYTES;
          expect(res.ok).toBe(fits);
        },
      ),
      { numRuns: 60 },
    );
  });
});

describe('POST /api/v1/agents/tokens', () => {
  it('the reserved scaler- prefix is refused in any case', async () => {
    for (const agentId of ['scaler-x', 'SCALER-x', 'Scaler-x', 'sCaLeR-x']) {
      const r = await post('/api/v1/agents/tokens', { labels: ['linux'], agentId });
      expect(r.status, agentId).toBe(400);
      expect(r.problems[0]).toMatch(/^agentId: .*reserved/);
    }
    expect((await post('/api/v1/agents/tokens', { labels: ['linux'], agentId: 'scalers-x' })).status).toBe(
      201,
    );
  });
});
