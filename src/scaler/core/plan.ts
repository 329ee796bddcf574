import { backoffKey, type BackoffCheck } from './backoff.js';
import type { CapBook } from './caps.js';
import type { ResourceAmount } from './resources.js';
import { findLabelSet, type JobRole, type RoutableLabelSet } from './routing.js';

/**
 * The reconcile planner: one pure pass over the whole queue that decides, per group of identical
 * jobs, which go to idle agents, which need a fresh agent, and why the rest wait. No I/O and no
 * clock reads: the shell applies the decisions (and the manager re-checks each spawn it makes).
 */
export interface PlanGroup {
  key: string;
  labels: string[];
  role?: JobRole | undefined;
  exclude?: string[] | undefined;
  /** Queued job ids, oldest first. */
  jobIds: readonly string[];
  /** Jobs of the group that already have an agent being provisioned. */
  provisioning: ReadonlySet<string>;
}

export interface PlanAgent {
  id: string;
}

export interface PlanInput<A extends PlanAgent, G extends PlanGroup = PlanGroup> {
  groups: readonly G[];
  idleAgents: readonly A[];
  canRun: (agent: A, group: G) => boolean;
  table: readonly RoutableLabelSet[];
  caps: CapBook;
  live: { global: number; perScaler: ReadonlyMap<string, number> };
  backoff: (key: string) => BackoffCheck;
  /** What one agent of this group would bill against the caps once routed to `match`. */
  requestsFor: (match: RoutableLabelSet, group: G) => ResourceAmount;
  /** False when no scaler is configured at all. */
  scaling: boolean;
}

export interface GroupDecision {
  key: string;
  assign: { jobId: string; agentId: string }[];
  spawn: { jobId: string; scalerName: string; labelSetIndex: number }[];
  /** Jobs left waiting after this pass (not counting those already being provisioned). */
  waiting: number;
  /** Why the waiting jobs wait. */
  reason?: string;
  /** Set when no label set can ever serve the group. */
  noBackend?: string;
  match?: RoutableLabelSet;
}

export function planReconcile<A extends PlanAgent, G extends PlanGroup>(input: PlanInput<A, G>): GroupDecision[] {
  const free = new Set(input.idleAgents);
  const caps = input.caps.clone();
  const perScaler = new Map(input.live.perScaler);
  let live = input.live.global;
  let synthetic = 0;
  const out: GroupDecision[] = [];
  for (const g of input.groups) {
    const d: GroupDecision = { key: g.key, assign: [], spawn: [], waiting: 0 };
    out.push(d);
    let i = 0;
    // Idle agents first: a warm or static agent starts the job with no spawn at all.
    for (const a of free) {
      if (i >= g.jobIds.length) break;
      if (!input.canRun(a, g)) continue;
      while (i < g.jobIds.length && g.provisioning.has(g.jobIds[i]!)) i++;
      if (i >= g.jobIds.length) break;
      d.assign.push({ jobId: g.jobIds[i++]!, agentId: a.id });
      free.delete(a);
    }
    const rest = g.jobIds.length - i;
    if (rest === 0) continue;
    if (!input.scaling) {
      d.waiting = rest;
      d.noBackend = 'no scaler is configured';
      continue;
    }
    const match = findLabelSet({ labels: g.labels, role: g.role, exclude: g.exclude }, input.table);
    if (!match) {
      d.waiting = rest;
      d.noBackend = `no scaler label set matches [${g.labels.join(',')}]`;
      continue;
    }
    d.match = match;
    const held = input.backoff(backoffKey(match.scalerName, match.key));
    if (held.blocked) {
      d.waiting = rest;
      d.reason = held.reason;
      continue;
    }
    const requests = input.requestsFor(match, g);
    for (; i < g.jobIds.length; i++) {
      const jobId = g.jobIds[i]!;
      if (g.provisioning.has(jobId)) continue;
      const scalerLive = perScaler.get(match.scalerName) ?? 0;
      const res = caps.reserve(
        { agentId: `plan-${synthetic++}`, scalerName: match.scalerName, requests, limits: requests },
        { global: live, scaler: scalerLive },
      );
      if (!res.ok) {
        d.reason = res.reason;
        break;
      }
      live++;
      perScaler.set(match.scalerName, scalerLive + 1);
      d.spawn.push({ jobId, scalerName: match.scalerName, labelSetIndex: match.index });
    }
    d.waiting = g.jobIds.length - i - (i < g.jobIds.length ? countFrom(g, i) : 0);
  }
  return out;
}

/** Jobs from index `i` on that already have a provision in flight (they are not "waiting"). */
function countFrom(g: PlanGroup, i: number): number {
  if (g.provisioning.size === 0) return 0;
  let n = 0;
  for (let k = i; k < g.jobIds.length; k++) if (g.provisioning.has(g.jobIds[k]!)) n++;
  return n;
}
