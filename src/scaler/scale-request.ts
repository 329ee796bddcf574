import { canonicalizeLabels } from '../config/index.js';
import type { Clock } from '../util/clock.js';
import { errorMessage } from '../util/errors.js';
import type { DecideState, Decision, PoolView } from './core/decide.js';
import type { EffectiveResources } from './core/resources.js';
import { describeTable, type RoutableLabelSet, type RouteQuery } from './core/routing.js';
import type { MachineLedger } from './ledger/machine-ledger.js';
import type { ScalerState } from './state.js';
import type { ScaleJob, ScaleResult } from './types.js';

/**
 * The request side of the async shell: the facts the pure `decide()` reads, gathered from the state
 * as it is now (and the ledger, when a machine pool is involved), and its decision turned into what
 * the caller gets back. The only write here is the refusal count; a spawn is the host's provision.
 */

/** The fields of a job that say where it may run. */
export type RoutedJob = Pick<ScaleJob, 'runsOn' | 'role' | 'excludeLabels' | 'container'>;

/** A job's placement wish in the routing table's terms (its labels canonicalized). */
export function routeQuery(job: RoutedJob): RouteQuery {
  const exclude = job.excludeLabels ? canonicalizeLabels(job.excludeLabels) : undefined;
  return { labels: canonicalizeLabels(job.runsOn), role: job.role, exclude, image: job.container?.image };
}

/** What the decision facts are read from. */
export interface DecisionHost {
  readonly opts: {
    readonly clock: Clock;
    readonly ledger?: MachineLedger | undefined;
    readonly isDraining?: (() => boolean) | undefined;
  };
  readonly state: ScalerState;
  /** A graceful stop of this manager is under way. */
  readonly stopping: boolean;
  resourcesFor(match: RoutableLabelSet, job?: ScaleJob): EffectiveResources;
  route(job: RoutedJob): RoutableLabelSet | undefined;
}

/** The facts the decision reads, as they are now. `pools`: ledger usage read just before. */
export function decisionState(
  host: DecisionHost,
  job?: ScaleJob,
  pools?: ReadonlyMap<string, PoolView>,
): DecideState {
  const s = host.state;
  return {
    now: host.opts.clock.now(),
    draining: host.stopping || !!host.opts.isDraining?.(),
    table: s.table,
    isProvisioning: (id) => s.jobToAgent.has(id),
    backoff: (key, now) => s.backoff.check(key, now),
    streak: (key) => s.backoff.streak(key),
    hasBackend: (name) => s.backends.has(name),
    requests: (m) => host.resourcesFor(m, job).requests,
    caps: s.caps,
    live: (name) => ({
      global: s.globalActiveCount(),
      scaler: s.backends.get(name)?.getActiveCount() ?? 0,
    }),
    machinePool: (name) => (host.opts.ledger ? s.entries.get(name)?.machinePool : undefined),
    pool: pools && ((name) => pools.get(name)),
  };
}

/** Ledger usage of the machine pool this job would draw from, when there is one. */
export async function poolViewsFor(
  host: DecisionHost,
  job: ScaleJob,
): Promise<ReadonlyMap<string, PoolView> | undefined> {
  const ledger = host.opts.ledger;
  const match = ledger && host.route(job);
  const pool = match && host.state.entries.get(match.scalerName)?.machinePool;
  if (!ledger || !pool) return undefined;
  try {
    return new Map([[pool, await ledger.usage(pool)]]);
  } catch (err) {
    return new Map([[pool, { error: errorMessage(err) }]]);
  }
}

/** What acting on a decision needs besides its facts. */
export interface ScaleRequestHost extends DecisionHost {
  poolViewsFor(job: ScaleJob): Promise<ReadonlyMap<string, PoolView> | undefined>;
  decideNow(job: ScaleJob, pools?: ReadonlyMap<string, PoolView>): Decision;
  provision(match: RoutableLabelSet, res: EffectiveResources, job?: ScaleJob): Promise<ScaleResult>;
}

/** Decide for this job now and act on it: a spawn, or the reason (and retry hint) there is none. */
export async function requestScaleFor(host: ScaleRequestHost, job: ScaleJob): Promise<ScaleResult> {
  // Only a machine pool makes the decision wait (for the ledger). Without one nothing awaits
  // between the in-flight gate and the reservation, so two requests for one job cannot both pass.
  const pools = host.opts.ledger ? await host.poolViewsFor(job) : undefined;
  const d = host.decideNow(job, pools);
  switch (d.action) {
    case 'spawn':
      return host.provision(d.match!, host.resourcesFor(d.match!, job), job);
    case 'backoff':
      return { action: 'skipped', reason: d.reason, retryAfterMs: d.retryAfterMs ?? 0 };
    case 'skip':
      return { action: 'skipped', reason: d.reason };
    case 'at-capacity':
      host.state.tally.spawnRefused();
      return { action: 'at-capacity', reason: d.reason };
    case 'no-backend':
      return {
        action: 'no-backend',
        reason: d.match ? d.reason : `${d.reason}; ${describeTable(host.state.table)}`,
      };
  }
}
