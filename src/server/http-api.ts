import type { LiveScalerSettings } from '../cluster/live-settings.js';
import { Hono } from 'hono';
import { bodyCap } from './body-cap.js';
import { HTTPException } from 'hono/http-exception';
import type { CancelOutcome } from '../cluster/remote-cancel.js';
import type { Dispatcher } from '../dispatch/dispatcher.js';
import { clip, quote } from '../jobs/safe-text.js';
import type { Store } from '../store/index.js';
import type { Clock } from '../util/clock.js';
import { errorMessage } from '../util/errors.js';
import type { Logger } from '../util/logger.js';
import { MAX_BODY_BYTES, bad, idProblem } from './http-validation.js';
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
import type { PeerPart } from '../cluster/cluster-view.js';
import type { ReloadRequest } from './reload-request.js';
import { registerScalerAuditRoutes } from './scaler-audit-routes.js';
import type { ScalerAuditor } from '../scaler/audit/auditor.js';
import { listVms } from './vm-views.js';
import { registerRetentionRoutes, type RetentionService } from './retention.js';
import { registerBackupRoute } from './backup-route.js';
import type { DiskVerdict } from './disk-watch.js';
import { registerHealthRoutes } from './health-routes.js';
import { jobView } from './job-view.js';
import { registerRunRoutes } from './run-routes.js';
import { registerScalerActionRoutes, registerScalerViewRoutes } from './scaler-routes.js';

// The job view has its own module now; tests still import it from here, so it stays importable here.
export { jobView } from './job-view.js';

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

/** The HTTP surface: health, metrics, and the admin API under /api/v1 (bearer access tokens, by role). */
export function createHttpApi(deps: HttpApiDeps): Hono {
  const app = new Hono();
  const { store, dispatcher } = deps;

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

  registerHealthRoutes(app, deps);

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

  registerRunRoutes(app, deps);
  registerJobRoutes(app, { ...deps, view: (row) => jobView(row) });
  registerTraceRoute(app, deps);
  registerSimulateRoute(app, {
    ...deps,
    currentConfig: () => dispatcher.scaler?.config,
    metricsText: () => deps.metrics.registry.metrics(),
  });
  registerAgentRoutes(app, deps);
  registerEventRoutes(app, deps);

  registerScalerViewRoutes(app, deps);
  registerRetentionRoutes(app, deps);
  registerBackupRoute(app, deps);
  registerScalerActionRoutes(app, deps);

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
