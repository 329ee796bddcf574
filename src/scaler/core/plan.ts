import type { BackoffCheck, BackoffStreak } from './backoff-types.js';
import type { CapBook } from './caps.js';
import { decide, type DecideState, type DecisionAction, type PoolView } from './decide.js';
import type { ResourceAmount } from './resources.js';
import type { JobRole, RoutableLabelSet } from './routing.js';

/**
 * The reconcile planner: one pure pass over the whole queue that decides, per group of identical
 * jobs, which go to idle agents, which need a fresh agent, and why the rest wait. No I/O and no
 * clock reads: the shell applies the decisions (and the manager re-checks each spawn it makes).
 * Whether a group gets an agent is the scaler's one decision (`decide`), asked once per group
 * against the caps as this pass has already filled them.
 */
export interface PlanGroup {
  key: string;
  labels: string[];
  role?: JobRole | undefined;
  exclude?: string[] | undefined;
  /** The group's `container:` image (part of the group key, so the same for every job in it). */
  image?: string | undefined;
  /** How many jobs are queued in the group. */
  size: number;
  /** Queued job ids, oldest first (iterated lazily: a pass rarely needs all of them). */
  jobIds: () => Iterable<string>;
}

export interface PlanAgent {
  id: string;
}

/**
 * The idle agents one pass may hand jobs to, each at most once. `matching(fits)` gives a picker for
 * one group: each call takes and returns the first agent, in the order agents are preferred, that
 * `fits` and is not yet taken in this pass.
 */
export interface FreeAgents<A> {
  matching(fits: (agent: A) => boolean): () => A | undefined;
}

/** Free agents from a list in preference order (the list is scanned for each pick). */
export function freeList<A>(agents: readonly A[]): FreeAgents<A> {
  const free = new Set(agents);
  return {
    matching: (fits) => () => {
      for (const a of free)
        if (fits(a)) {
          free.delete(a);
          return a;
        }
      return undefined;
    },
  };
}

export interface PlanInput<A extends PlanAgent, G extends PlanGroup = PlanGroup> {
  groups: readonly G[];
  /** Idle agents in preference order, or an index that picks as that list would. */
  idleAgents: readonly A[] | FreeAgents<A>;
  canRun: (agent: A, group: G) => boolean;
  table: readonly RoutableLabelSet[];
  /**
   * Where a group routes in `table`, when the caller keeps that answer between passes (it must
   * equal `findLabelSet` for the group's labels, role, exclusions and image). Unset: looked up.
   */
  route?: ((group: G) => RoutableLabelSet | undefined) | undefined;
  caps: CapBook;
  live: { global: number; perScaler: ReadonlyMap<string, number> };
  backoff: (key: string) => BackoffCheck;
  /** Jobs that already have an agent being provisioned. */
  isProvisioning: (jobId: string) => boolean;
  /** What one agent of this group would bill against the caps once routed to `match`. */
  requestsFor: (match: RoutableLabelSet, group: G) => ResourceAmount;
  /** False when no scaler is configured at all. */
  scaling: boolean;
  /** The rest of the scaler's decision facts; the defaults suit a scaler with nothing special on. */
  now?: number;
  draining?: boolean;
  hasBackend?: (scalerName: string) => boolean;
  machinePool?: (scalerName: string) => string | undefined;
  pool?: (name: string) => PoolView | undefined;
  streak?: (key: string) => BackoffStreak | undefined;
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
  /** The decision for the group's first job that needs an agent (unset when idle agents took all). */
  action?: DecisionAction;
}

export function planReconcile<A extends PlanAgent, G extends PlanGroup>(
  input: PlanInput<A, G>,
): GroupDecision[] {
  const free = 'matching' in input.idleAgents ? input.idleAgents : freeList(input.idleAgents);
  const caps = input.caps.clone();
  const perScaler = new Map(input.live.perScaler);
  let live = input.live.global;
  let synthetic = 0;
  const out: GroupDecision[] = [];
  let current: G | undefined;
  const state: DecideState = {
    now: input.now ?? 0,
    draining: input.draining ?? false,
    table: input.table,
    route: input.route && (() => input.route!(current!)),
    isProvisioning: () => false, // `next()` below already skips jobs in flight
    backoff: (key) => input.backoff(key),
    streak: input.streak,
    hasBackend: input.hasBackend ?? (() => true),
    requests: (m) => input.requestsFor(m, current!),
    caps,
    live: (name) => ({ global: live, scaler: perScaler.get(name) ?? 0 }),
    machinePool: input.machinePool ?? (() => undefined),
    pool: input.pool,
    quiet: true,
  };
  for (const g of input.groups) {
    current = g;
    const d: GroupDecision = { key: g.key, assign: [], spawn: [], waiting: 0 };
    out.push(d);
    const it = g.jobIds()[Symbol.iterator]();
    let decided = 0;
    /** Next job of the group that is not already being provisioned. */
    const next = (): string | undefined => {
      for (let r = it.next(); !r.done; r = it.next()) {
        decided++;
        if (!input.isProvisioning(r.value)) return r.value;
      }
      return undefined;
    };
    let pending = next();
    // Idle agents first: a warm or static agent starts the job with no spawn at all.
    const pick = pending === undefined ? undefined : free.matching((a) => input.canRun(a, g));
    while (pending !== undefined) {
      const a = pick!();
      if (a === undefined) break;
      d.assign.push({ jobId: pending, agentId: a.id });
      pending = next();
    }
    if (pending === undefined) continue;
    const rest = () => g.size - decided + 1;
    if (!input.scaling) {
      d.waiting = rest();
      d.noBackend = 'no scaler is configured';
      continue;
    }
    const dec = decide({ labels: g.labels, role: g.role, exclude: g.exclude, image: g.image }, state);
    d.action = dec.action;
    if (dec.match) d.match = dec.match;
    if (dec.action !== 'spawn') {
      d.waiting = rest();
      if (dec.action === 'no-backend' && !dec.match) d.noBackend = dec.reason;
      else d.reason = dec.reason;
      continue;
    }
    const match = dec.match!;
    const requests = dec.requests!;
    // The decision admitted the first job; each further one of the group takes the next cap slot.
    while (pending !== undefined) {
      const scalerLive = perScaler.get(match.scalerName) ?? 0;
      const res = caps.reserve(
        { agentId: `plan-${synthetic++}`, scalerName: match.scalerName, requests, limits: requests },
        { global: live, scaler: scalerLive },
      );
      if (!res.ok) {
        d.reason = res.reason;
        d.waiting = rest();
        break;
      }
      live++;
      perScaler.set(match.scalerName, scalerLive + 1);
      d.spawn.push({ jobId: pending, scalerName: match.scalerName, labelSetIndex: match.index });
      pending = next();
    }
  }
  return out;
}
