import { poolFit, type PoolLoad } from '../ledger/pool-fit.js';
import { backoffKey } from './backoff.js';
import type { BackoffCheck, BackoffStreak } from './backoff-types.js';
import type { CapBook } from './caps.js';
import type { ResourceAmount } from './resources.js';
import {
  findLabelSet,
  noMatchReason,
  type JobRole,
  type RoutableLabelSet,
  type RouteQuery,
} from './routing.js';

/**
 * The one scaling decision: may this job get a fresh agent now, and if not, why not. Pure: every
 * fact comes in through `DecideState` (the caller binds the clock). `requestScale`, the reconcile
 * planner and `scaler explain` all call it, so explain cannot give a reason the scaler never used.
 */

export type DecisionAction = 'spawn' | 'at-capacity' | 'backoff' | 'no-backend' | 'skip';

export interface Decision {
  action: DecisionAction;
  reason: string;
  /** Each gate checked, in order, in words. */
  trace: string[];
  match?: RoutableLabelSet | undefined;
  /** What the agent would bill against the caps. */
  requests?: ResourceAmount | undefined;
  /** With `backoff`: how long until the label set is tried again. */
  retryAfterMs?: number | undefined;
}

/** The job's routing facts, canonical (labels folded, excludeLabels folded). */
export interface DecideJob {
  /** Absent when deciding for a group of identical jobs (the planner tracks in-flight jobs itself). */
  id?: string | undefined;
  labels: string[];
  role?: JobRole | undefined;
  exclude?: readonly string[] | undefined;
  image?: string | undefined;
}

/** A machine pool as the ledger last showed it, or why it could not be read. */
export type PoolView = PoolLoad | { error: string };

export interface DecideState {
  now: number;
  draining: boolean;
  table: readonly RoutableLabelSet[];
  /**
   * The table's answer for this job, when the caller keeps it (a planner deciding for thousands
   * of label combinations each pass routes each once per table). Must equal
   * `findLabelSet(query, table)`; unset means look it up.
   */
  route?: ((query: RouteQuery) => RoutableLabelSet | undefined) | undefined;
  isProvisioning: (jobId: string) => boolean;
  backoff: (key: string, nowMs: number) => BackoffCheck;
  /** The failure streak of a label set that is not blocking, for the trace only. */
  streak?: ((key: string) => BackoffStreak | undefined) | undefined;
  hasBackend: (scalerName: string) => boolean;
  /** The resources cascade (job → label set → defaults), requests side. */
  requests: (match: RoutableLabelSet) => ResourceAmount;
  caps: Pick<CapBook, 'check'>;
  live: (scalerName: string) => { global: number; scaler: number };
  machinePool: (scalerName: string) => string | undefined;
  /** Ledger usage per pool; `undefined` (or no function) when not read: the reservation checks it. */
  pool?: ((name: string) => PoolView | undefined) | undefined;
  /** Skip writing the trace (the planner decides for thousands of groups and reads only the action). */
  quiet?: boolean | undefined;
}

/** A label set's backoff key, made once per (immutable) table entry rather than once per decision. */
const backoffKeys = new WeakMap<RoutableLabelSet, string>();
function backoffKeyOf(ls: RoutableLabelSet): string {
  let key = backoffKeys.get(ls);
  if (key === undefined) backoffKeys.set(ls, (key = backoffKey(ls.scalerName, ls.key)));
  return key;
}

const SKIP_DRAINING = 'orchestrator is draining';
/** The dispatcher recognises this reason: another pass already provisions the job. */
export const PROVISION_IN_FLIGHT = 'provision-in-flight';

/** The trace of a quiet decision: one shared, frozen empty list (nothing reads or extends it). */
const NO_TRACE: string[] = Object.freeze([]) as unknown as string[];

function verdict(
  trace: string[] | undefined,
  action: DecisionAction,
  reason: string,
  match?: RoutableLabelSet,
  requests?: ResourceAmount,
  retryAfterMs?: number,
): Decision {
  return { action, reason, trace: trace ?? NO_TRACE, match, requests, retryAfterMs };
}

export function decide(job: DecideJob, s: DecideState): Decision {
  // `trace?.push(…)` does not even build the line when quiet.
  const trace: string[] | undefined = s.quiet ? undefined : [];
  if (s.draining) {
    trace?.push(`draining: ${SKIP_DRAINING}`);
    return verdict(trace, 'skip', SKIP_DRAINING);
  }
  if (job.id !== undefined && s.isProvisioning(job.id)) {
    trace?.push('in flight: an agent is already being provisioned for this job');
    return verdict(trace, 'skip', PROVISION_IN_FLIGHT);
  }

  // The job is its own route query (labels, role, exclusions, image): nothing to copy per decision.
  const query: RouteQuery = job;
  const match = s.route ? s.route(query) : findLabelSet(query, s.table);
  const unmatched = traceRouting(query, match, s.table, trace);
  if (!match) return verdict(trace, 'no-backend', unmatched!);
  if (!s.hasBackend(match.scalerName)) {
    const reason = `scaler "${match.scalerName}" has no running backend`;
    trace?.push(`backend: ${reason}`);
    return verdict(trace, 'no-backend', reason, match);
  }

  const key = backoffKeyOf(match);
  const held = s.backoff(key, s.now);
  if (held.blocked) {
    trace?.push(`backoff: ${held.reason}`);
    return verdict(trace, 'backoff', held.reason, match, undefined, held.retryAfterMs);
  }
  const streak = trace && s.streak?.(key);
  trace?.push(
    streak
      ? `backoff: not held; ${streak.consecutive} transient failure(s) in a row, retried${streak.lastError ? ` (last: ${streak.lastError.kind}: ${streak.lastError.message})` : ''}`
      : 'backoff: not held',
  );

  const requests = s.requests(match);
  trace?.push(
    `resources: requests ${requests.cpus} cpu, ${requests.memBytes} bytes (job → label set → defaults)`,
  );
  const cap = s.caps.check(match.scalerName, requests, s.live(match.scalerName));
  if (!cap.ok) {
    trace?.push(`caps: blocked by ${cap.blocker}: ${cap.reason}`);
    return verdict(trace, 'at-capacity', cap.reason, match, requests);
  }
  trace?.push('caps: room for one more agent (scaler and global counts and resources)');

  const poolName = s.machinePool(match.scalerName);
  if (poolName !== undefined) {
    const view = s.pool?.(poolName);
    if (view === undefined) {
      trace?.push(`machine pool "${poolName}": checked when the agent is reserved`);
    } else if ('error' in view) {
      const reason = `machine pool "${poolName}": ledger unavailable: ${view.error}`;
      trace?.push(reason);
      return verdict(trace, 'at-capacity', reason, match, requests);
    } else {
      const fit = poolFit(poolName, view, requests.cpus, requests.memBytes);
      if (!fit.ok) {
        trace?.push(fit.reason);
        return verdict(trace, 'at-capacity', fit.reason, match, requests);
      }
      trace?.push(
        `machine pool "${poolName}": room (${view.usedCpu} cpu, ${view.usedMemoryBytes} bytes in use)`,
      );
    }
  }
  const reason = `spawn an agent on scaler "${match.scalerName}" label set [${match.key}]`;
  trace?.push(`decision: ${reason}`);
  return verdict(trace, 'spawn', reason, match, requests);
}

/**
 * The routing gates in words: excludeLabels veto, container/process-mode skip, the match. Returns
 * why nothing matched, when nothing did.
 */
function traceRouting(
  q: RouteQuery,
  match: RoutableLabelSet | undefined,
  table: readonly RoutableLabelSet[],
  trace: string[] | undefined,
): string | undefined {
  if (!trace) return match ? undefined : noMatchReason(q, table);
  trace.push(`route: job labels [${q.labels.join(',')}]${q.role ? `, role ${q.role}` : ''}`);
  // The extra lookups only run for jobs that carry the option, so plain jobs cost nothing more.
  if (q.exclude?.length) {
    const unvetoed = findLabelSet({ ...q, exclude: undefined }, table);
    trace.push(
      unvetoed && unvetoed !== match
        ? `excludeLabels [${q.exclude.join(',')}]: vetoed ${unvetoed.scalerName}[${unvetoed.key}]`
        : `excludeLabels [${q.exclude.join(',')}]: no candidate vetoed`,
    );
  }
  if (q.image) {
    const anyMode = findLabelSet({ ...q, image: undefined }, table);
    trace.push(
      anyMode?.hostProcess && anyMode !== match
        ? `container image "${q.image}": skipped process-mode set ${anyMode.scalerName}[${anyMode.key}]`
        : `container image "${q.image}": no process-mode set skipped`,
    );
  }
  if (match) {
    const gate = match.gate.length ? ` (gate: ${match.gate.join(',')})` : '';
    trace.push(`matched scaler "${match.scalerName}" label set [${match.key}]${gate}`);
    return undefined;
  }
  const why = noMatchReason(q, table);
  trace.push(`no match: ${why}`);
  return why;
}
