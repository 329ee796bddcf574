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
  /** True when no agent is free at all, so no group need ask (optional: asked when absent). */
  none?(): boolean;
}

/** Free agents from a list in preference order (the list is scanned for each pick). */
export function freeList<A>(agents: readonly A[]): FreeAgents<A> {
  const free = new Set(agents);
  return {
    none: () => free.size === 0,
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
  /** True when no job at all is being provisioned (`isProvisioning` would answer false for all). */
  noneProvisioning?: boolean | undefined;
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
  reason?: string | undefined;
  /** Set when no label set can ever serve the group. */
  noBackend?: string | undefined;
  match?: RoutableLabelSet | undefined;
  /** The decision for the group's first job that needs an agent (unset when idle agents took all). */
  action?: DecisionAction | undefined;
}

/**
 * The empty list every decision starts with, replaced by its own list on the first push: a pass
 * decides for thousands of groups and most hand out nothing. Frozen, so a push to it throws.
 */
const NONE: never[] = Object.freeze([]) as unknown as never[];

/** Stands for a group's first job before it is read: with nothing in flight, it needs an agent. */
const FIRST: unique symbol = Symbol("the group's first job");
type Pending = string | typeof FIRST | undefined;

/**
 * Walks one group's jobs at a time, skipping those already being provisioned; one per pass, so a
 * group costs no closures. With no job in flight anywhere, a group's jobs are not read until one is
 * handed out: most groups of a long queue only wait, and reading their first job is a pass's
 * largest cost per group.
 */
class GroupCursor {
  private it: Iterator<string> | undefined;
  private group: PlanGroup | undefined;
  private decided = 0;

  constructor(
    private readonly isProvisioning: (jobId: string) => boolean,
    private readonly noneInFlight: boolean,
  ) {}

  /** The group's first job that needs an agent, if any (`FIRST` until `id` reads it). */
  start(g: PlanGroup): Pending {
    this.group = g;
    this.decided = 0;
    this.it = undefined;
    if (this.noneInFlight) {
      if (g.size === 0) return undefined;
      this.decided = 1;
      return FIRST;
    }
    this.it = g.jobIds()[Symbol.iterator]();
    return this.next();
  }

  /** The id `start` or `next` stands for. */
  id(p: string | typeof FIRST): string {
    if (p !== FIRST) return p;
    this.it = this.group!.jobIds()[Symbol.iterator]();
    return this.it.next().value as string;
  }

  next(): string | undefined {
    // The first job was counted but not read: read past it.
    if (!this.it) this.id(FIRST);
    const it = this.it!;
    for (let r = it.next(); !r.done; r = it.next()) {
      this.decided++;
      if (!this.isProvisioning(r.value)) return r.value;
    }
    return undefined;
  }

  /** How many jobs are left undecided, the one just returned by `next` among them. */
  rest(): number {
    return this.group!.size - this.decided + 1;
  }
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
  const liveView = { global: 0, scaler: 0 };
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
    // One view, filled on each ask: the cap check reads it at once and keeps nothing.
    live: (name) => {
      liveView.global = live;
      liveView.scaler = perScaler.get(name) ?? 0;
      return liveView;
    },
    machinePool: input.machinePool ?? (() => undefined),
    pool: input.pool,
    quiet: true,
  };
  const cursor = new GroupCursor(input.isProvisioning, input.noneProvisioning ?? false);
  for (const g of input.groups) {
    current = g;
    // Every field set from the start: one shape for all decisions, no growth per field.
    const d: GroupDecision = {
      key: g.key,
      assign: NONE,
      spawn: NONE,
      waiting: 0,
      reason: undefined,
      noBackend: undefined,
      match: undefined,
      action: undefined,
    };
    out.push(d);
    let pending: Pending = cursor.start(g);
    // Idle agents first: a warm or static agent starts the job with no spawn at all.
    if (pending !== undefined && !free.none?.()) {
      const pick = free.matching((a) => input.canRun(a, g));
      while (pending !== undefined) {
        const a = pick();
        if (a === undefined) break;
        if (d.assign === NONE) d.assign = [];
        d.assign.push({ jobId: cursor.id(pending), agentId: a.id });
        pending = cursor.next();
      }
    }
    if (pending === undefined) continue;
    if (!input.scaling) {
      d.waiting = cursor.rest();
      d.noBackend = 'no scaler is configured';
      continue;
    }
    const dec = decide(g, state);
    d.action = dec.action;
    if (dec.match) d.match = dec.match;
    if (dec.action !== 'spawn') {
      d.waiting = cursor.rest();
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
        d.waiting = cursor.rest();
        break;
      }
      live++;
      perScaler.set(match.scalerName, scalerLive + 1);
      if (d.spawn === NONE) d.spawn = [];
      d.spawn.push({ jobId: cursor.id(pending), scalerName: match.scalerName, labelSetIndex: match.index });
      pending = cursor.next();
    }
  }
  return out;
}
