/**
 * The run and job routes of the admin API: submit a run, read a run, list jobs, read one job and
 * its log, cancel a job. Registered by createHttpApi after the id guard, which has already
 * refused any `:id` that does not look like one.
 */
import type { Context, Hono } from 'hono';
import type { CancelOutcome } from '../cluster/remote-cancel.js';
import type { Dispatcher } from '../dispatch/dispatcher.js';
import { reasonFor } from '../jobs/failure-reason.js';
import { parseRunSpec } from '../jobs/run-spec.js';
import { JOB_STATES, type JobState, type Store } from '../store/index.js';
import type { DiskVerdict } from './disk-watch.js';
import { afterProblem, bad, idProblem, notFound, readJsonBody } from './http-validation.js';
import { jobView } from './job-view.js';
import type { RetentionService } from './retention.js';

export interface RunRouteDeps {
  store: Store;
  dispatcher: Dispatcher;
  /** Clustering: a cancel that also reaches jobs held by another instance. */
  cancelJob?: (id: string) => Promise<CancelOutcome>;
  /** Retention: the answer for a pruned job. */
  retention?: RetentionService;
  /** The data dir's free space: below its floor, new runs are refused. */
  diskSpace?: { verdict(): DiskVerdict } | undefined;
}

export function registerRunRoutes(app: Hono, deps: RunRouteDeps): void {
  const { store, dispatcher } = deps;
  // A job retention removed answers 410 with its tombstone, not a bare "does not exist".
  const jobNotFound = async (c: Context, id: string) => {
    const pruned = await deps.retention?.prunedJob(id);
    return pruned ? c.json(pruned, 410) : notFound(c, 'job', id);
  };

  app.post('/api/v1/runs', async (c) => {
    const disk = deps.diskSpace?.verdict();
    if (disk && !disk.ok) return c.json({ error: 'unavailable', problems: [disk.problem] }, 503);
    const body = await readJsonBody(c);
    if (!body.ok) return bad(c, body.problems);
    const parsed = parseRunSpec(body.value);
    if (!parsed.ok) return bad(c, parsed.problems);
    const res = await dispatcher.submit(parsed.value);
    return c.json(res, 201);
  });

  app.get('/api/v1/runs/:id', async (c) => {
    const id = c.req.param('id');
    const rows = await store.jobs.list({ runId: id, limit: 10_000 });
    if (!rows.length) return notFound(c, 'run', id);
    const counts: Record<string, number> = {};
    for (const r of rows) counts[r.state] = (counts[r.state] ?? 0) + 1;
    return c.json({
      id,
      counts,
      jobs: rows.reverse().map((r) => jobView(r, dispatcher.queue.get(r.id)?.waiting)),
    });
  });

  app.get('/api/v1/jobs', async (c) => {
    const state = c.req.query('state');
    if (state !== undefined && !JOB_STATES.includes(state as JobState))
      return bad(c, [`state: one of ${JOB_STATES.join(', ')}`]);
    const limitRaw = c.req.query('limit');
    const limit = limitRaw === undefined ? 100 : Number(limitRaw);
    if (!Number.isInteger(limit) || limit < 1 || limit > 10_000)
      return bad(c, ['limit: an integer from 1 to 10000']);
    const runId = c.req.query('runId');
    const runIdProblem = runId === undefined ? undefined : idProblem('runId', runId);
    if (runIdProblem) return bad(c, [runIdProblem]);
    const rows = await store.jobs.list({
      ...(state ? { state: state as JobState } : {}),
      ...(runId ? { runId } : {}),
      limit,
    });
    return c.json({ jobs: rows.map((r) => jobView(r, dispatcher.queue.get(r.id)?.waiting)) });
  });

  app.get('/api/v1/jobs/:id', async (c) => {
    await dispatcher.writes.flush(); // read what agents reported up to now, not a tick behind
    const row = await store.jobs.get(c.req.param('id'));
    if (!row) return jobNotFound(c, c.req.param('id'));
    const steps = await store.logs.steps(row.id);
    return c.json({
      ...jobView(row, dispatcher.queue.get(row.id)?.waiting),
      reason: reasonFor(row.state, row.reason, steps, row.exit_code),
      stepCount: (row.spec as { steps?: unknown[] }).steps?.length ?? null,
      steps: steps.map((s) => ({
        idx: s.idx,
        name: s.name,
        exitCode: s.exit_code,
        timedOut: s.timed_out,
        startedAt: s.started_at,
        finishedAt: s.finished_at,
        durationMs: s.finished_at ? s.finished_at.getTime() - s.started_at.getTime() : null,
      })),
    });
  });

  app.get('/api/v1/jobs/:id/logs', async (c) => {
    const after = c.req.query('after');
    const problem = afterProblem(after);
    if (problem) return bad(c, [problem]);
    const row = await store.jobs.get(c.req.param('id'));
    if (!row) return jobNotFound(c, c.req.param('id'));
    await dispatcher.logs.flush();
    const lines = await store.logs.list(row.id, after === undefined ? undefined : Number(after));
    return c.json({
      jobId: row.id,
      state: row.state,
      logTruncated: row.log_truncated,
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
    if (!row) return notFound(c, 'job', c.req.param('id'));
    const res = deps.cancelJob
      ? await deps.cancelJob(row.id)
      : (await dispatcher.cancel(row.id)) === 'cancelled'
        ? ({ kind: 'cancelled' } as const)
        : ({ kind: 'not-open', state: row.state } as const);
    if (res.kind === 'not-open')
      return c.json({ error: 'conflict', problems: [`job ${row.id} is already ${res.state}`] }, 409);
    // Asked of the instance that holds the job; it has not answered yet (the job stays open for now).
    if (res.kind === 'requested') return c.json({ id: row.id, state: res.state, cancelRequested: true }, 202);
    return c.json({ id: row.id, state: 'cancelled' });
  });
}
