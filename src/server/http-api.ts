import type { LiveScalerSettings } from '../cluster/live-settings.js';
import { Hono, type Context } from 'hono';
import { bodyCap } from './body-cap.js';
import { HTTPException } from 'hono/http-exception';
import type { CancelOutcome } from '../cluster/remote-cancel.js';
import type { Dispatcher } from '../dispatch/dispatcher.js';
import { reasonFor } from '../jobs/failure-reason.js';
import { parseRunSpec } from '../jobs/run-spec.js';
import { clip, quote } from '../jobs/safe-text.js';
import type { JobRow, JobState, Store } from '../store/index.js';
import type { Clock } from '../util/clock.js';
import { errorMessage } from '../util/errors.js';
import type { Logger } from '../util/logger.js';
import {
  EXPIRING_SOON_MS,
  MAX_BODY_BYTES,
  afterProblem,
  bad,
  idProblem,
  readJsonBody,
} from './http-validation.js';
import { registerAgentRoutes } from './agent-routes.js';
import { registerJobRoutes } from './job-routes.js';
import { registerSimulateRoute } from './simulate-route.js';
import { registerTraceRoute } from './trace-route.js';
import { registerEventRoutes } from './event-routes.js';
import { registerBackoffRoutes } from './backoff-routes.js';
import type { BackoffResetFanout } from '../cluster/backoff-resets.js';

import { registerClusterRoutes } from './cluster-routes.js';
import { accessControl } from './access-control.js';
import { registerAccessRoutes } from './access-routes.js';
import { registerDashboard } from './dashboard/routes.js';
import { liveStream } from './dashboard/stream.js';
import type { Metrics } from './metrics.js';
import type { StoreProbe } from './readiness.js';
import { describeScalerStatus, explainJob } from './scaler-views.js';
import { diagnoseScalers } from './scaler-diagnose.js';
import { mergeDiagnose, mergeScalerStatus, type PeerPart } from '../cluster/cluster-view.js';
import { partial, readPeerParts } from '../cluster/peer-read.js';
import { reapOrphans } from './reap-orphans.js';
import { parseReloadRequest, type ReloadRequest } from './reload-request.js';
import { registerScalerAuditRoutes } from './scaler-audit-routes.js';
import type { ScalerAuditor } from '../scaler/audit/auditor.js';
import { listVms } from './vm-views.js';
import { registerRetentionRoutes, type RetentionService } from './retention.js';
import { registerBackupRoute } from './backup-route.js';
import type { DiskVerdict } from './disk-watch.js';

export interface HttpApiDeps {
  store: Store;
  dispatcher: Dispatcher;
  clock: Clock;
  /** `/metrics` answers without a token (`--metrics-public`). */
  metricsPublic?: boolean;
  metrics: Metrics;
  isReady: () => boolean;
  /** A graceful stop is under way (checked before isReady). */
  isDraining?: () => boolean;
  /** Every 500 is logged here: a client only sees a generic message. */
  logger: Logger;
  /** When set, /readyz also requires the store to take writes. */
  readiness?: StoreProbe;
  reloadScaler: (o: ReloadRequest) => Promise<{ result: string; problems?: string[]; plan?: unknown }>;
  /** Named in `diagnose` fixes ("fix binaryPath in <file>"). */
  scalerConfigPath?: string | undefined;
  /** The instances sharing this database (clustering). */
  clusterStatus?: () => Promise<unknown>;
  /** This instance, named on its own rows of status, diagnose and the agent list. */
  instanceId: string;
  /** The other instances' published parts of those views (clustering); absent on one instance. */
  peerParts?: (() => Promise<PeerPart[]>) | undefined;
  /** Settings an admin changes for every instance on the database (`kici-admin cluster-settings`). */
  clusterSettings?: LiveScalerSettings | undefined;
  /** `diagnose`'s firecracker-network row; undefined when no VM scaler is configured. */
  vmNetworkCheck?: () => Promise<
    { name: string; status: 'PASS' | 'WARN' | 'FAIL'; message: string } | undefined
  >;
  /** Clustering: a cancel that also reaches jobs held by another instance. */
  cancelJob?: (id: string) => Promise<CancelOutcome>;
  /** Retention: prune routes, the database view in diagnose, and the answer for a pruned job. */
  retention?: RetentionService;
  /** The embedded database's consistent snapshot (absent on PostgreSQL). */
  snapshot?: (() => Promise<Uint8Array>) | undefined;
  /** The data dir's free space: below its floor, /readyz answers 503 and new runs are refused. */
  diskSpace?: { verdict(): DiskVerdict } | undefined;
  /** Clustering: `reset-backoff` reaches every live instance; absent (or undefined) on one instance. */
  backoffResets?: (() => BackoffResetFanout | undefined) | undefined;
  /** The scaler audit (absent without scalers). */
  auditor?: () => ScalerAuditor | undefined;
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

export function jobView(row: JobRow, waiting?: string) {
  return {
    id: row.id,
    runId: row.run_id,
    name: row.name,
    state: row.state,
    runsOn: row.runs_on,
    priority: row.priority,
    owner: row.owner,
    agentId: row.agent_id,
    logTruncated: row.log_truncated,
    exitCode: row.exit_code,
    reason: row.reason,
    waiting: row.state === 'queued' ? (waiting ?? row.last_provisioning_error ?? null) : null,
    lastProvisioningError: row.last_provisioning_error,
    attempts: row.attempts,
    attempt: row.attempt,
    retryOf: row.retry_of,
    createdAt: row.created_at,
    dispatchedAt: row.dispatched_at,
    startedAt: row.started_at,
    finishedAt: row.finished_at,
  };
}

/** The HTTP surface: health, metrics, and the admin API under /api/v1 (bearer access tokens, by role). */
export function createHttpApi(deps: HttpApiDeps): Hono {
  const app = new Hono();
  const { store, dispatcher } = deps;
  const notFound = (c: Context, what: string, id: string) =>
    c.json({ error: 'not found', problems: [`${what} ${id} does not exist`] }, 404);
  // A job retention removed answers 410 with its tombstone, not a bare "does not exist".
  const jobNotFound = async (c: Context, id: string) => {
    const pruned = await deps.retention?.prunedJob(id);
    return pruned ? c.json(pruned, 410) : notFound(c, 'job', id);
  };

  // An oversized body is refused before it is buffered (by its declared length, or counted while a
  // chunked one streams in), and the connection is closed so the rest of it is never read.
  app.use(
    '*',
    bodyCap(MAX_BODY_BYTES, (c) => {
      c.header('connection', 'close');
      return c.json(
        { error: 'payload too large', problems: [`(body): at most ${MAX_BODY_BYTES} bytes (8 MiB)`] },
        413,
      );
    }),
  );

  // Before any route: each one needs the role the route table gives it (see route-roles.ts).
  app.use(
    '*',
    accessControl({
      tokens: store.accessTokens,
      audit: store.audit,
      clock: deps.clock,
      logger: deps.logger,
      metricsPublic: deps.metricsPublic ?? false,
    }),
  );

  app.get('/healthz', (c) => c.json({ status: 'ok' }));
  app.get('/readyz', async (c) => {
    if (deps.isDraining?.()) return c.json({ status: 'draining' }, 503);
    if (!deps.isReady()) return c.json({ status: 'starting' }, 503);
    const disk = deps.diskSpace?.verdict();
    if (disk && !disk.ok) return c.json({ status: 'disk-low', problem: disk.problem }, 503);
    const health = deps.readiness ? await deps.readiness.current() : { ok: true as const };
    if (!health.ok) return c.json({ status: 'store-unwritable', problem: health.problem }, 503);
    return c.json({ status: 'ready' });
  });
  app.get('/metrics', async (c) => {
    deps.metrics.refresh(dispatcher);
    deps.metrics.agentTokensExpiring.set(
      await store.tokens.countExpiring(new Date(deps.clock.now()), EXPIRING_SOON_MS),
    );
    return c.text(await deps.metrics.registry.metrics(), 200, {
      'content-type': deps.metrics.registry.contentType,
    });
  });

  // The dashboard's login takes any live access token; what it may do is then the token's role.
  registerDashboard(
    app,
    async (token) => (await store.accessTokens.check(token, new Date(deps.clock.now()))).ok,
  );
  app.get('/api/v1/stream', (c) => liveStream(c, dispatcher, () => deps.isDraining?.() ?? false));

  // Every id in a path must look like an id before it reaches a query.
  for (const [pattern, name] of [
    ['/api/v1/runs/:id', 'id'],
    ['/api/v1/jobs/:id', 'id'],
    ['/api/v1/jobs/:id/*', 'id'],
    ['/api/v1/scaler/explain/:jobId', 'jobId'],
  ] as const) {
    app.use(pattern, async (c, next) => {
      const problem = idProblem(name, c.req.param(name as 'id') ?? '');
      if (problem) return bad(c, [problem]);
      await next();
    });
  }

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

  registerJobRoutes(app, { ...deps, view: (row) => jobView(row) });
  registerTraceRoute(app, deps);
  registerSimulateRoute(app, {
    ...deps,
    currentConfig: () => dispatcher.scaler?.config,
    metricsText: () => deps.metrics.registry.metrics(),
  });
  registerAgentRoutes(app, deps);
  registerEventRoutes(app, deps);

  // Every instance's part: this one's live, the others' as they last published them.
  app.get('/api/v1/scaler/status', async (c) => {
    const peers = await readPeerParts(deps.peerParts);
    return c.json({
      ...mergeScalerStatus(deps.instanceId, describeScalerStatus(dispatcher, deps.clock), peers.parts),
      ...partial(peers),
    });
  });
  app.get('/api/v1/scaler/diagnose', async (c) => {
    const peers = await readPeerParts(deps.peerParts);
    return c.json({
      ...mergeDiagnose(
        deps.instanceId,
        await diagnoseScalers(dispatcher, deps.clock, deps.scalerConfigPath, deps.vmNetworkCheck),
        peers.parts,
      ),
      ...partial(peers),
      ...(deps.retention ? { database: await deps.retention.view() } : {}),
    });
  });
  registerRetentionRoutes(app, deps);
  registerBackupRoute(app, deps);
  app.get('/api/v1/scaler/explain/:jobId', async (c) => {
    const row = await store.jobs.get(c.req.param('jobId'));
    if (!row) return notFound(c, 'job', c.req.param('jobId'));
    return c.json(await explainJob(dispatcher, deps.clock, row));
  });
  app.post('/api/v1/scaler/reload', async (c) => {
    const parsed = parseReloadRequest({ single: c.req.query('single'), timeout: c.req.query('timeout') });
    if (!parsed.ok) return c.json({ error: 'bad request', problems: parsed.problems }, 400);
    return c.json(await deps.reloadScaler(parsed.request));
  });
  app.post('/api/v1/scaler/reap-orphans', async (c) => {
    const dry = c.req.query('dryRun');
    if (dry !== undefined && dry !== 'true' && dry !== 'false')
      return c.json(
        { error: 'bad request', problems: [`dryRun: expected true or false, got ${quote(dry)}`] },
        400,
      );
    return c.json(await reapOrphans(dispatcher, dry === 'true', deps.logger));
  });

  registerScalerAuditRoutes(app, deps);
  registerClusterRoutes(app, deps);
  registerAccessRoutes(app, deps);
  registerBackoffRoutes(app, deps);
  app.get('/api/v1/scaler/vms', (c) => c.json({ vms: listVms(dispatcher, deps.clock.now()) }));

  app.notFound((c) =>
    c.json({ error: 'not found', problems: [`no route ${c.req.method} ${quote(c.req.path)}`] }, 404),
  );
  app.onError((err, c) => {
    if (err instanceof HTTPException) return err.getResponse();
    deps.logger.error(
      { err: errorMessage(err), stack: (err as Error).stack, method: c.req.method, path: clip(c.req.path) },
      'HTTP request failed with a 500',
    );
    return c.json(
      { error: 'internal error', problems: ['the server could not complete the request; see its log'] },
      500,
    );
  });
  return app;
}
