/**
 * The scaler routes createHttpApi owns itself, in two groups because the retention and backup
 * routes are registered between them and registration order is kept as it was: the views
 * (status, diagnose) and the actions (explain a job, reload, reap orphans).
 */
import type { Hono } from 'hono';
import { mergeDiagnose, mergeScalerStatus, type PeerPart } from '../cluster/cluster-view.js';
import { partial, readPeerParts } from '../cluster/peer-read.js';
import type { Dispatcher } from '../dispatch/dispatcher.js';
import { quote } from '../jobs/safe-text.js';
import type { Store } from '../store/index.js';
import type { Clock } from '../util/clock.js';
import type { Logger } from '../util/logger.js';
import { notFound } from './http-validation.js';
import { reapOrphans } from './reap-orphans.js';
import { parseReloadRequest, type ReloadRequest } from './reload-request.js';
import type { RetentionService } from './retention.js';
import { diagnoseScalers } from './scaler-diagnose.js';
import { describeScalerStatus, explainJob } from './scaler-views.js';

export interface ScalerViewRouteDeps {
  dispatcher: Dispatcher;
  clock: Clock;
  /** This instance, named on its own rows of status and diagnose. */
  instanceId: string;
  /** The other instances' published parts of those views (clustering); absent on one instance. */
  peerParts?: (() => Promise<PeerPart[]>) | undefined;
  /** Named in `diagnose` fixes ("fix binaryPath in <file>"). */
  scalerConfigPath?: string | undefined;
  /** `diagnose`'s firecracker-network row; undefined when no VM scaler is configured. */
  vmNetworkCheck?: () => Promise<
    { name: string; status: 'PASS' | 'WARN' | 'FAIL'; message: string } | undefined
  >;
  /** Retention: the database view in diagnose. */
  retention?: RetentionService;
}

export interface ScalerActionRouteDeps {
  store: Store;
  dispatcher: Dispatcher;
  clock: Clock;
  logger: Logger;
  reloadScaler: (o: ReloadRequest) => Promise<{ result: string; problems?: string[]; plan?: unknown }>;
}

export function registerScalerViewRoutes(app: Hono, deps: ScalerViewRouteDeps): void {
  const { dispatcher } = deps;
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
}

export function registerScalerActionRoutes(app: Hono, deps: ScalerActionRouteDeps): void {
  const { store, dispatcher } = deps;
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
}
