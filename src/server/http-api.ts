import { timingSafeEqual } from 'node:crypto';
import { Hono, type Context } from 'hono';
import { z } from 'zod';
import { canonicalizeLabels } from '../config/index.js';
import type { Dispatcher } from '../dispatch/dispatcher.js';
import { newId } from '../dispatch/dispatcher.js';
import { parseRunSpec } from '../jobs/run-spec.js';
import type { JobRow, JobState, Store } from '../store/index.js';
import type { Clock } from '../util/clock.js';
import type { Metrics } from './metrics.js';
import { describeScalerStatus, explainJob } from './scaler-views.js';

export interface HttpApiDeps {
  store: Store;
  dispatcher: Dispatcher;
  clock: Clock;
  adminToken: string;
  metrics: Metrics;
  isReady: () => boolean;
  /** A graceful stop is under way (checked before isReady). */
  isDraining?: () => boolean;
  reloadScaler: () => Promise<{ result: string; problems?: string[]; plan?: unknown }>;
}

const JOB_STATES: JobState[] = [
  'queued',
  'dispatched',
  'running',
  'succeeded',
  'failed',
  'cancelled',
  'timed-out',
  'no-backend',
];

const tokenBodySchema = z.strictObject({
  labels: z.array(z.string().min(1)).min(1, 'at least one label'),
  agentId: z
    .string()
    .regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$/, 'an agent id (letters, digits, ".", "_", "-")')
    .refine((v) => !v.startsWith('scaler-'), 'the "scaler-" prefix is reserved for scaler-spawned agents')
    .optional(),
  ttlSeconds: z.number().int().positive().optional(),
});

function bad(c: Context, problems: string[]) {
  return c.json({ error: 'invalid request', problems }, 400);
}

function safeEqual(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

export function jobView(row: JobRow, waiting?: string) {
  return {
    id: row.id,
    runId: row.run_id,
    name: row.name,
    state: row.state,
    runsOn: row.runs_on,
    agentId: row.agent_id,
    exitCode: row.exit_code,
    reason: row.reason,
    waiting: row.state === 'queued' ? (waiting ?? row.last_provisioning_error ?? null) : null,
    lastProvisioningError: row.last_provisioning_error,
    attempts: row.attempts,
    createdAt: row.created_at,
    dispatchedAt: row.dispatched_at,
    startedAt: row.started_at,
    finishedAt: row.finished_at,
  };
}

/** The HTTP surface: health, metrics, and the admin API under /api/v1 (bearer admin token). */
export function createHttpApi(deps: HttpApiDeps): Hono {
  const app = new Hono();
  const { store, dispatcher } = deps;

  app.get('/healthz', (c) => c.json({ status: 'ok' }));
  app.get('/readyz', (c) => {
    if (deps.isDraining?.()) return c.json({ status: 'draining' }, 503);
    return deps.isReady() ? c.json({ status: 'ready' }) : c.json({ status: 'starting' }, 503);
  });
  app.get('/metrics', async (c) => {
    deps.metrics.refresh(dispatcher);
    return c.text(await deps.metrics.registry.metrics(), 200, {
      'content-type': deps.metrics.registry.contentType,
    });
  });

  app.use('/api/v1/*', async (c, next) => {
    const header = c.req.header('authorization') ?? '';
    const token = header.startsWith('Bearer ') ? header.slice(7) : '';
    if (!token || !safeEqual(token, deps.adminToken)) {
      return c.json(
        { error: 'unauthorized', problems: ['a valid admin token is required (Authorization: Bearer …)'] },
        401,
      );
    }
    await next();
  });

  app.post('/api/v1/runs', async (c) => {
    let body: unknown;
    try {
      body = await c.req.json();
    } catch {
      return bad(c, ['(body): must be a JSON object']);
    }
    const parsed = parseRunSpec(body);
    if (!parsed.ok) return bad(c, parsed.problems);
    const res = await dispatcher.submit(parsed.value);
    return c.json(res, 201);
  });

  app.get('/api/v1/runs/:id', async (c) => {
    const rows = await store.jobs.list({ runId: c.req.param('id'), limit: 10_000 });
    if (!rows.length)
      return c.json({ error: 'not found', problems: [`run ${c.req.param('id')} does not exist`] }, 404);
    const counts: Record<string, number> = {};
    for (const r of rows) counts[r.state] = (counts[r.state] ?? 0) + 1;
    return c.json({
      id: c.req.param('id'),
      counts,
      jobs: rows.reverse().map((r) => jobView(r, dispatcher.queue.get(r.id)?.waiting)),
    });
  });

  app.get('/api/v1/jobs', async (c) => {
    const state = c.req.query('state');
    if (state && !JOB_STATES.includes(state as JobState))
      return bad(c, [`state: one of ${JOB_STATES.join(', ')}`]);
    const limitRaw = c.req.query('limit');
    const limit = limitRaw === undefined ? 100 : Number(limitRaw);
    if (!Number.isInteger(limit) || limit < 1 || limit > 10_000)
      return bad(c, ['limit: an integer from 1 to 10000']);
    const rows = await store.jobs.list({
      ...(state ? { state: state as JobState } : {}),
      ...(c.req.query('runId') ? { runId: c.req.query('runId')! } : {}),
      limit,
    });
    return c.json({ jobs: rows.map((r) => jobView(r, dispatcher.queue.get(r.id)?.waiting)) });
  });

  app.get('/api/v1/jobs/:id', async (c) => {
    const row = await store.jobs.get(c.req.param('id'));
    if (!row)
      return c.json({ error: 'not found', problems: [`job ${c.req.param('id')} does not exist`] }, 404);
    const steps = await store.logs.steps(row.id);
    return c.json({
      ...jobView(row, dispatcher.queue.get(row.id)?.waiting),
      steps: steps.map((s) => ({
        idx: s.idx,
        name: s.name,
        exitCode: s.exit_code,
        timedOut: s.timed_out,
        startedAt: s.started_at,
        finishedAt: s.finished_at,
      })),
    });
  });

  app.get('/api/v1/jobs/:id/logs', async (c) => {
    const after = c.req.query('after');
    if (after !== undefined && !/^\d+$/.test(after)) return bad(c, ['after: a log line id (integer)']);
    const row = await store.jobs.get(c.req.param('id'));
    if (!row)
      return c.json({ error: 'not found', problems: [`job ${c.req.param('id')} does not exist`] }, 404);
    await dispatcher.logs.flush();
    const lines = await store.logs.list(row.id, after === undefined ? undefined : Number(after));
    return c.json({
      jobId: row.id,
      state: row.state,
      lines: lines.map((l) => ({
        id: Number(l.id),
        step: l.step_idx,
        stream: l.stream,
        line: l.line,
        ts: l.ts,
      })),
    });
  });

  app.post('/api/v1/jobs/:id/cancel', async (c) => {
    const row = await store.jobs.get(c.req.param('id'));
    if (!row)
      return c.json({ error: 'not found', problems: [`job ${c.req.param('id')} does not exist`] }, 404);
    const res = await dispatcher.cancel(row.id);
    if (res === 'not-open')
      return c.json({ error: 'conflict', problems: [`job ${row.id} is already ${row.state}`] }, 409);
    return c.json({ id: row.id, state: 'cancelled' });
  });

  app.get('/api/v1/agents', async (c) => {
    const connected = dispatcher.registry.list().map((a) => ({
      id: a.id,
      kind: a.kind,
      scaler: a.scalerName ?? null,
      labels: a.labelList,
      busyJobId: a.busyJobId ?? null,
      connectedAt: new Date(a.connectedAtMs),
      lastSeenAt: new Date(a.lastSeenMs),
    }));
    return c.json({ agents: connected });
  });

  app.post('/api/v1/agents/tokens', async (c) => {
    let body: unknown;
    try {
      body = await c.req.json();
    } catch {
      return bad(c, ['(body): must be a JSON object']);
    }
    const parsed = tokenBodySchema.safeParse(body);
    if (!parsed.success)
      return bad(
        c,
        parsed.error.issues.map((i) => `${i.path.join('.') || '(body)'}: ${i.message}`),
      );
    const labels = canonicalizeLabels(parsed.data.labels);
    const reserved = labels.filter((l) => l.startsWith('kici:'));
    if (reserved.length) return bad(c, [`labels: the kici: prefix is reserved (${reserved.join(', ')})`]);
    const agentId = parsed.data.agentId ?? newId('static');
    const minted = await store.tokens.mint({
      agentId,
      labels,
      kind: 'static',
      ttlMs: parsed.data.ttlSeconds ? parsed.data.ttlSeconds * 1000 : undefined,
      now: new Date(deps.clock.now()),
    });
    dispatcher.noteStaticToken(agentId, labels, minted.expiresAt);
    void dispatcher.requestPump();
    return c.json({ agentId, labels, token: minted.token, expiresAt: minted.expiresAt }, 201);
  });

  app.get('/api/v1/scaler/status', (c) => c.json(describeScalerStatus(dispatcher, deps.clock)));
  app.get('/api/v1/scaler/explain/:jobId', async (c) => {
    const row = await store.jobs.get(c.req.param('jobId'));
    if (!row)
      return c.json({ error: 'not found', problems: [`job ${c.req.param('jobId')} does not exist`] }, 404);
    return c.json(explainJob(dispatcher, deps.clock, row));
  });
  app.post('/api/v1/scaler/reload', async (c) => c.json(await deps.reloadScaler()));

  app.notFound((c) =>
    c.json({ error: 'not found', problems: [`no route ${c.req.method} ${c.req.path}`] }, 404),
  );
  app.onError((err, c) => c.json({ error: 'internal error', problems: [err.message] }, 500));
  return app;
}
