import type { WarmChange } from '../config/warm-schedule.js';
import { isWarmStock, phaseOf } from '../scaler/agent-book.js';
import { hasRegistered, isPending } from '../scaler/agent-lifecycle.js';
import { PROVISION_IN_FLIGHT, type DecisionAction, type PoolView } from '../scaler/core/decide.js';
import type { ScaleJob } from '../scaler/types.js';
import type { Dispatcher } from '../dispatch/dispatcher.js';
import type { JobSpec } from '../jobs/run-spec.js';
import type { JobRow } from '../store/index.js';
import type { Clock } from '../util/clock.js';

/**
 * `kici-admin scaler status`: one row per scaler with counts, usage, caps, backoff and its agents.
 * A scaler removed by a reload stays listed, marked retiring, until its last agent is gone.
 */
export function describeScalerStatus(d: Dispatcher, clock: Clock) {
  const scaler = d.scaler;
  if (!scaler) return { configured: false, scalers: [] };
  const now = clock.now();
  const book = scaler.capBook();
  const entries = scaler.entries();
  const backoff = scaler.backoff.snapshot();
  const lifts = scaler.backoff.liftHistory();
  return {
    configured: true,
    globalMaxAgents: scaler.config.globalMaxAgents,
    globalActive: scaler.globalActiveCount(),
    globalReserved: book.count(),
    globalUsage: book.usage(),
    globalResourceCap: scaler.config.globalResourceCap ?? null,
    scalers: scaler.scalerEntries().map(({ entry: s, retiringSinceMs }) => {
      const mine = entries.filter((e) => e.scalerName === s.name);
      const backend = scaler.backendList().find((b) => b.name === s.name);
      return {
        name: s.name,
        type: s.type,
        retiring: retiringSinceMs !== undefined,
        retiringForMs: retiringSinceMs === undefined ? null : Math.max(0, now - retiringSinceMs),
        active: backend?.getActiveCount() ?? 0,
        spawning: mine.filter((e) => isPending(e.phase)).length,
        registered: mine.filter((e) => hasRegistered(e.phase)).length,
        reserved: book.count(s.name),
        maxAgents: s.maxAgents,
        usage: book.usage(s.name),
        resourceCap: s.resourceCap ?? null,
        labelSets: s.labelSets.map((l) => l.labels),
        deliveryGivenUp: backend?.deliveryProblem?.() ?? null,
        confinement: backend?.confinement?.() ?? [],
        agents: mine.map((e) => ({
          agentId: e.agentId,
          phase: e.phase,
          labelSet: e.labelSetKey,
          boundJobId: e.boundJobId ?? null,
          warm: e.origin.warm,
        })),
        backoff: backoff
          .filter((b) => b.scalerName === s.name)
          .map((b) => ({
            labelSet: b.labelSetKey,
            consecutiveFailures: b.consecutive,
            retryInMs: Math.max(0, b.deferUntilMs - now),
            lastError: b.lastError ?? null,
          })),
        // The last lift of each label set, so status shows why a backoff ended before its time.
        backoffLifted: lifts
          .filter((l) => l.scalerName === s.name)
          .map((l) => ({
            labelSet: l.labelSetKey,
            by: l.by,
            at: new Date(l.atMs).toISOString(),
            consecutiveFailures: l.consecutive,
            // An operator's: the access token that asked, and the instance the request went to.
            requestedBy: l.requestedBy ?? null,
            via: l.via ?? null,
          })),
        warmPool:
          s.warmPool?.enabled && retiringSinceMs === undefined
            ? {
                ...s.warmPool,
                pools: scaler.warm
                  .specs()
                  .filter((p) => p.scalerName === s.name)
                  .map((p) => ({
                    labelSet: p.labelSetKey,
                    labels: s.labelSets[p.labelSetIndex]?.labels ?? [],
                    target: scaler.warm.targetOf(p),
                    next: nextOf(scaler.warm.nextChange(p)),
                    ready: scaler.warm.ready(p).length,
                    inFlight: mine.filter(
                      (e) => isWarmStock(e) && isPending(e.phase) && e.labelSetKey === p.labelSetKey,
                    ).length,
                  })),
                // Label sets the pool leaves cold, with the reason `scaler validate` warns with.
                skipped: scaler.warm
                  .skipped()
                  .filter((k) => k.scalerName === s.name)
                  .map((k) => ({ labelSet: k.labelSetKey, reason: k.reason })),
              }
            : null,
      };
    }),
  };
}

/** A pool's next scheduled size, as the API shows it (absent without a schedule). */
function nextOf(c: WarmChange | null): { at: string; size: number } | null {
  return c ? { at: new Date(c.atMs).toISOString(), size: c.size } : null;
}

/** The job as the scaler sees it, from its stored row (the same facts the dispatcher passes). */
function scaleJobOf(row: JobRow): ScaleJob {
  const spec = row.spec as JobSpec;
  return {
    id: row.id,
    runId: row.run_id,
    runsOn: row.runs_on,
    ...(spec.resources ? { resources: spec.resources } : {}),
    ...(spec.container ? { container: spec.container } : {}),
    ...(spec.role ? { role: spec.role } : {}),
    ...(spec.excludeLabels ? { excludeLabels: spec.excludeLabels } : {}),
  };
}

export interface JobExplanation {
  jobId: string;
  state: JobRow['state'];
  runsOn: string[];
  priority: number;
  owner: string | null;
  /** Unset for a job that is no longer queued. */
  action?: DecisionAction;
  reason?: string;
  matched?: string;
  /** The gates the decision checked, in order. */
  trace?: string[];
  lines: string[];
}

/**
 * `kici-admin scaler explain <job>`: the scaler's own decision for the job (the one `requestScale`
 * and the planner make), read-only, gate by gate.
 */
export async function explainJob(d: Dispatcher, clock: Clock, row: JobRow): Promise<JobExplanation> {
  const queued = row.state === 'queued' && d.scaler ? scaleJobOf(row) : undefined;
  const pools = queued ? await d.scaler!.poolViewsFor(queued) : undefined;
  return explainJobWith(d, clock, row, pools);
}

/** The synchronous part of `explainJob`, over machine-pool usage already read. */
export function explainJobWith(
  d: Dispatcher,
  _clock: Clock,
  row: JobRow,
  pools?: ReadonlyMap<string, PoolView>,
): JobExplanation {
  const lines: string[] = [];
  const base = {
    jobId: row.id,
    state: row.state,
    runsOn: row.runs_on,
    priority: row.priority,
    owner: row.owner,
  };
  if (row.state !== 'queued') {
    lines.push(`job is ${row.state}${row.agent_id ? ` on agent ${row.agent_id}` : ''}; nothing to scale`);
    if (row.reason) lines.push(`reason: ${row.reason}`);
    return { ...base, lines };
  }
  const held = d.queue.get(row.id);
  if (held?.waiting) lines.push(`waiting: ${held.waiting}`);
  lines.push(queueOrderLine(row, held ? d.queue.runningFor(held) : 0));
  const scaler = d.scaler;
  if (!scaler) {
    const reason = 'no scaler is configured; only connected agents can take this job';
    lines.push(reason);
    return { ...base, action: 'no-backend', reason, trace: [], lines };
  }
  const decision = scaler.decideNow(scaleJobOf(row), pools);
  lines.push(...decision.trace);
  if (decision.reason === PROVISION_IN_FLIGHT) {
    const inFlight = scaler.entries().find((e) => e.boundJobId === row.id && isPending(e.phase));
    if (inFlight) lines.push(`agent ${inFlight.agentId} is being provisioned for it (${phaseOf(inFlight)})`);
  }
  if (row.last_provisioning_error) lines.push(`last provisioning error: ${row.last_provisioning_error}`);
  return {
    ...base,
    action: decision.action,
    reason: decision.reason,
    ...(decision.match ? { matched: decision.match.key } : {}),
    trace: decision.trace,
    lines,
  };
}

/** Where the fair-share rule puts a queued job: its priority, and its owner's share of the label set. */
function queueOrderLine(row: JobRow, running: number): string {
  const owner = row.owner ? `owner "${row.owner}"` : 'no owner';
  return `queue order: priority ${row.priority}, ${owner} with ${running} job(s) of this label set running (highest priority first, then the owner with fewest running, then oldest)`;
}
