import { chooseOwner, NO_LOAD, type OwnerHead, type OwnerLoad } from './fair-share.js';
import { routingSpec, type QueuedJob, type QueuedJobSpec, type SeqList } from './queued-job.js';

/** One owner's jobs of one priority in one group: the list knows where it sits, so jobs need not. */
export interface OwnerList extends SeqList {
  group: Group;
  priority: number;
  owner: string;
}

export interface Group {
  key: string;
  labels: string[];
  spec: QueuedJobSpec;
  /** How many jobs the group holds. */
  size: number;
  /** priority → owner → that owner's jobs of that priority, in seq order. */
  levels: Map<number, Map<string, OwnerList>>;
  /** The priorities present, highest first. */
  priorities: number[];
  /** Its face to the planner: made once, so a pass allocates nothing per group to list them. */
  view: QueueGroup;
  /** Answers kept for the group's life by whoever plans over it (see `QueueGroup.remember`). */
  memo?: Map<object, unknown>;
  /** Why its jobs wait, and when that was said (a job's own reason said later wins). */
  reason?: string | undefined;
  reasonAt: number;
  /** The latest write of a job's own reason in it: a group reason said again may hide it. */
  ownAt: number;
  /** Sort keys, written by `orderedGroups` just before it sorts. */
  top: number;
  oldest: number;
  /** Creation order: the last tie-break, as the map's insertion order was. */
  born: number;
}

/** One group of interchangeable queued jobs, as the planner reads it. Live: reads the queue as it is. */
export interface QueueGroup {
  readonly key: string;
  readonly labels: string[];
  /** How many jobs it holds now. */
  readonly size: number;
  /** The job it would hand out first. */
  readonly first: QueuedJob;
  /** Its jobs in dispatch order. */
  jobs: () => Iterable<QueuedJob>;
  /**
   * A value kept with the group until it empties: `compute(group)` the first time `slot` is asked
   * for, the stored value after (so `compute` need not be a new closure on each ask). For facts
   * that depend only on what makes the group (its labels and routing spec), so a planner works
   * them out once per group instead of once per pass.
   */
  remember<T>(slot: object, compute: (group: QueueGroup) => T): T;
}

export function newGroup(
  key: string,
  job: QueuedJob,
  born: number,
  ordered: (g: Group) => Iterator<QueuedJob> & Iterable<QueuedJob>,
): Group {
  const g: Group = {
    key,
    labels: job.runsOn,
    spec: routingSpec(job.spec),
    size: 0,
    levels: new Map(),
    priorities: [],
    reasonAt: -1,
    ownAt: -1,
    top: 0,
    oldest: 0,
    born,
    view: {
      key,
      labels: job.runsOn,
      get size() {
        return g.size;
      },
      get first() {
        return ordered(g).next().value as QueuedJob;
      },
      jobs: () => ordered(g),
      remember<T>(slot: object, compute: (group: QueueGroup) => T): T {
        const memo = (g.memo ??= new Map());
        if (memo.has(slot)) return memo.get(slot) as T;
        const v = compute(g.view);
        memo.set(slot, v);
        return v;
      },
    },
  };
  return g;
}

/**
 * The group's jobs by the fair-share rule. Each pick counts as a start for the picks after it, so a
 * pass that fills several agents at once shares them as the rule would one by one. O(owners) per
 * job yielded, not a scan of the group.
 */
export function* fairOrder(
  g: Group,
  base: ReadonlyMap<string, OwnerLoad> | undefined,
  starts: number,
): Generator<QueuedJob> {
  const sim = new Map<string, OwnerLoad>();
  const load = (o: string) => sim.get(o) ?? base?.get(o) ?? NO_LOAD;
  let tick = starts;
  for (const p of [...g.priorities]) {
    const level = g.levels.get(p);
    if (!level) continue;
    const heads = new Map<string, OwnerHead & { it: Iterator<QueuedJob>; job: QueuedJob }>();
    for (const [owner, fifo] of level) {
      const it = fifo.jobs.values();
      const r = it.next();
      if (!r.done) heads.set(owner, { owner, headSeq: r.value.seq, it, job: r.value });
    }
    for (let h = chooseOwner(heads.values(), load); h; h = chooseOwner(heads.values(), load)) {
      yield h.job;
      let l = sim.get(h.owner);
      if (!l) sim.set(h.owner, (l = { ...load(h.owner) }));
      l.running++;
      l.lastStart = ++tick;
      if (heads.size === 1) {
        // The only owner left at this priority: no choice to make, so no bookkeeping per job
        // beyond the count (the next priority's choice still sees these picks as starts).
        for (let r = h.it.next(); !r.done; r = h.it.next()) {
          yield r.value;
          l.running++;
          l.lastStart = ++tick;
        }
        break;
      }
      const r = h.it.next();
      if (r.done) heads.delete(h.owner);
      else {
        h.job = r.value;
        h.headSeq = r.value.seq;
      }
    }
  }
}

/** The submission order of the group's oldest job: O(priorities × owners), not a scan of its jobs. */
export function oldestSeq(g: Group): number {
  let min = Infinity;
  for (const level of g.levels.values())
    for (const fifo of level.values()) {
      const head = fifo.jobs.values().next().value;
      if (head && head.seq < min) min = head.seq;
    }
  return min;
}
