import type { JobSpec } from '../jobs/run-spec.js';
import { chooseOwner, NO_LOAD, type OwnerHead, type OwnerLoad } from './fair-share.js';

/**
 * What a queued job needs in memory: the facts routing, agent fit and caps read. Steps and env stay
 * in the store and come back with the claim, so 100,000 queued jobs do not hold 100,000 scripts.
 */
export type QueuedJobSpec = Pick<JobSpec, 'role'> & Partial<Omit<JobSpec, 'role'>>;

export function routingSpec(spec: JobSpec | QueuedJobSpec): QueuedJobSpec {
  return {
    role: spec.role,
    ...(spec.excludeLabels ? { excludeLabels: spec.excludeLabels } : {}),
    ...(spec.resources ? { resources: spec.resources } : {}),
    ...(spec.container ? { container: spec.container } : {}),
  };
}

export interface QueuedJob {
  id: string;
  runId: string;
  name: string;
  seq: number;
  runsOn: string[];
  spec: QueuedJobSpec;
  createdAtMs: number;
  /** Higher goes first within a label set; unset means 0. */
  priority?: number | undefined;
  /** The team the run belongs to, for fair share; unset is the unnamed owner "". */
  owner?: string | undefined;
  /** Why the job is still waiting, as last decided; shown by `job list` and `scaler explain`. */
  waiting?: string;
}

/** Jobs in submission (seq) order, and the highest-seq one added, to tell an append from a re-insert. */
interface SeqList {
  jobs: Map<string, QueuedJob>;
  last?: QueuedJob;
}

/** One owner's jobs of one priority in one group: the list knows where it sits, so jobs need not. */
interface OwnerList extends SeqList {
  group: Group;
  priority: number;
  owner: string;
}

interface Group {
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
   * A value kept with the group until it empties: `compute()` the first time `slot` is asked for,
   * the stored value after. For facts that depend only on what makes the group (its labels and
   * routing spec), so a planner works them out once per group instead of once per pass.
   */
  remember<T>(slot: object, compute: () => T): T;
}

const prio = (j: QueuedJob) => j.priority ?? 0;
const ownerOf = (j: QueuedJob) => j.owner ?? '';

/**
 * Queued jobs in memory, grouped by their runsOn label set so a dispatch pass decides once per
 * group instead of once per job. Within a group jobs are handed out by the fair-share rule
 * (fair-share.ts): highest priority first, then the least-served owner, then submission order.
 */
export class JobQueue {
  private readonly groups = new Map<string, Group>();
  /**
   * The groups as last ordered: sorting the previous order again is nearly linear (it is mostly
   * still sorted), where sorting the map's order each pass is n log n. Emptied groups are dropped
   * from it lazily.
   */
  private order: Group[] = [];
  private orderStale = false;
  private born = 0;
  /** Job id → the list holding it (the job itself is found in the list, so no wrapper per job). */
  private readonly byId = new Map<string, OwnerList>();
  /** A group's shared routing spec → its key: a started job finds its group without a new key. */
  private readonly keyOf = new WeakMap<QueuedJobSpec, string>();
  /** group key → owner → that owner's jobs of the group now running; kept while the group is empty. */
  private readonly loads = new Map<string, Map<string, OwnerLoad>>();
  private starts = 0;

  get size(): number {
    return this.byId.size;
  }

  has(id: string): boolean {
    return this.byId.has(id);
  }

  get(id: string): QueuedJob | undefined {
    return this.byId.get(id)?.jobs.get(id);
  }

  add(job: QueuedJob): void {
    if (this.byId.has(job.id)) return;
    const key = groupKey(job);
    let g = this.groups.get(key);
    if (!g) {
      g = this.newGroup(key, job);
      this.groups.set(key, g);
      this.keyOf.set(g.spec, key);
      this.order.push(g);
    }
    // Every job of a group has the same labels and routing facts (they make the key): share them.
    job.runsOn = g.labels;
    job.spec = g.spec;
    g.size++;
    let level = g.levels.get(prio(job));
    if (!level) {
      level = new Map();
      g.levels.set(prio(job), level);
      g.priorities.push(prio(job));
      g.priorities.sort((a, b) => b - a);
    }
    let fifo = level.get(ownerOf(job));
    if (!fifo) {
      fifo = { jobs: new Map(), group: g, priority: prio(job), owner: ownerOf(job) };
      level.set(ownerOf(job), fifo);
    }
    // A requeued job goes back to its place, not to the end.
    pushInOrder(fifo, job);
    this.byId.set(job.id, fifo);
  }

  remove(id: string): QueuedJob | undefined {
    const fifo = this.byId.get(id);
    const job = fifo?.jobs.get(id);
    if (!fifo || !job) return undefined;
    const group = fifo.group;
    this.byId.delete(id);
    group.size--;
    const level = group.levels.get(prio(job))!;
    fifo.jobs.delete(id);
    if (fifo.jobs.size === 0) level.delete(ownerOf(job));
    if (level.size === 0) {
      group.levels.delete(prio(job));
      group.priorities.splice(group.priorities.indexOf(prio(job)), 1);
    }
    if (group.size === 0) {
      this.groups.delete(group.key);
      this.orderStale = true;
    }
    return job;
  }

  private newGroup(key: string, job: QueuedJob): Group {
    const ordered = (g: Group) => this.ordered(g);
    const g: Group = {
      key,
      labels: job.runsOn,
      spec: routingSpec(job.spec),
      size: 0,
      levels: new Map(),
      priorities: [],
      top: 0,
      oldest: 0,
      born: this.born++,
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
        remember<T>(slot: object, compute: () => T): T {
          const memo = (g.memo ??= new Map());
          if (memo.has(slot)) return memo.get(slot) as T;
          const v = compute();
          memo.set(slot, v);
          return v;
        },
      },
    };
    return g;
  }

  private keyFor(job: QueuedJob): string {
    return this.keyOf.get(job.spec) ?? groupKey(job);
  }

  /** A job of this queue's making was handed to an agent: its owner now has one more running. */
  noteStarted(job: QueuedJob): void {
    const key = this.keyFor(job);
    let owners = this.loads.get(key);
    if (!owners) this.loads.set(key, (owners = new Map()));
    const l = owners.get(ownerOf(job)) ?? NO_LOAD;
    owners.set(ownerOf(job), { running: l.running + 1, lastStart: ++this.starts });
  }

  /** A started job left its agent (finished, or requeued). */
  noteEnded(job: QueuedJob): void {
    const key = this.keyFor(job);
    const owners = this.loads.get(key);
    const l = owners?.get(ownerOf(job));
    if (!owners || !l) return;
    owners.set(ownerOf(job), { ...l, running: Math.max(0, l.running - 1) });
    // Nothing of the label set queued and this owner idle there: forget it, so label sets seen
    // once do not pile up for the life of the process.
    if (l.running <= 1 && !this.groups.has(key)) {
      owners.delete(ownerOf(job));
      if (owners.size === 0) this.loads.delete(key);
    }
  }

  /** How many of this owner's jobs of the job's label set run now (shown by `scaler explain`). */
  runningFor(job: QueuedJob): number {
    return this.loads.get(this.keyFor(job))?.get(ownerOf(job))?.running ?? 0;
  }

  /**
   * The group's jobs in dispatch order. Each pick counts as a start for the picks after it, so a
   * pass that fills several agents at once shares them as the rule would one by one. O(owners)
   * per job yielded, not a scan of the group.
   */
  private ordered(g: Group): Iterator<QueuedJob> & Iterable<QueuedJob> {
    // The common case, one priority and one owner: the list itself is the order.
    if (g.priorities.length === 1) {
      const level = g.levels.get(g.priorities[0]!)!;
      if (level.size === 1) return level.values().next().value!.jobs.values();
    }
    return this.fairOrder(g);
  }

  private *fairOrder(g: Group): Generator<QueuedJob> {
    const base = this.loads.get(g.key);
    const sim = new Map<string, OwnerLoad>();
    const load = (o: string) => sim.get(o) ?? base?.get(o) ?? NO_LOAD;
    let tick = this.starts;
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

  /**
   * Groups ordered by their most urgent job (highest priority, then oldest), so that work is
   * considered first, also for the scaler's caps.
   */
  orderedGroups(): QueueGroup[] {
    if (this.orderStale) {
      // A group emptied and filled again is a new group object, already pushed by add().
      this.order = this.order.filter((g) => this.groups.get(g.key) === g);
      this.orderStale = false;
    }
    for (const g of this.order) {
      g.top = g.priorities[0] ?? 0;
      g.oldest = oldestSeq(g);
    }
    this.order.sort((a, b) => b.top - a.top || a.oldest - b.oldest || a.born - b.born);
    return this.order.map((g) => g.view);
  }

  /** Every queued job, group by group (not in dispatch order). */
  all(): QueuedJob[] {
    return [...this.byId.keys()].map((id) => this.get(id)!);
  }
}

/** The submission order of the group's oldest job: O(priorities × owners), not a scan of its jobs. */
function oldestSeq(g: Group): number {
  let min = Infinity;
  for (const level of g.levels.values())
    for (const fifo of level.values()) {
      const head = fifo.jobs.values().next().value;
      if (head && head.seq < min) min = head.seq;
    }
  return min;
}

/**
 * Add a job in seq order. One older than the last goes back to its place in a new map, not
 * clear() + refill: a live iterator over the old one would otherwise start over, forever.
 */
function pushInOrder(l: SeqList, job: QueuedJob): void {
  if (l.last && l.last.seq > job.seq) {
    const all = [...l.jobs.values(), job].sort((a, b) => a.seq - b.seq);
    l.jobs = new Map(all.map((j) => [j.id, j]));
  } else {
    l.jobs.set(job.id, job);
    l.last = job;
  }
}

function groupKey(job: QueuedJob): string {
  const role = job.spec.role ?? 'execution';
  const image = job.spec.container?.image ?? '';
  const exclude = [...new Set((job.spec.excludeLabels ?? []).map((l) => l.trim().toLowerCase()))].sort();
  // Jobs of one group must be interchangeable for routing, agent fit and caps, so everything that
  // decides those is in the key. JSON, not a joined string: a label may itself contain ',' or '|'.
  return JSON.stringify([job.runsOn, role, image, exclude, job.spec.resources ?? null]);
}
