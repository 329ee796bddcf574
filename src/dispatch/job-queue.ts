import { NO_LOAD, type OwnerLoad } from './fair-share.js';
import {
  fairOrder,
  newGroup,
  oldestSeq,
  type Group,
  type OwnerList,
  type QueueGroup,
} from './queue-group.js';
import {
  groupKey,
  ownerOf,
  prio,
  pushInOrder,
  type QueuedJob,
  type QueuedJobSpec,
  type SeqList,
} from './queued-job.js';
import { SeqMap } from './seq-map.js';

export type { QueueGroup } from './queue-group.js';
export { routingSpec, type QueuedJob, type QueuedJobSpec } from './queued-job.js';

/** No job of a group is spared its group's reason (shared; never written to). */
const NO_KEEP: readonly string[] = Object.freeze([]);

/** Where a queued job sits, and the reason it was given itself (and when: a later group reason wins). */
interface Slot {
  list: OwnerList;
  text: string | undefined;
  at: number;
}

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
  /** Job id → where it sits (the job itself is found in the list). */
  private readonly byId = new Map<string, Slot>();
  /** Orders reason writes: a job's own reason and its group's, whichever was said last is shown. */
  private said = 0;
  /** Moves whenever what the queue shows may have changed (see `changes`). */
  private shown = 0;
  /** How a queued job's `waiting` reads and writes: shared by every job, so nothing is made per job. */
  private readonly waitingProp: PropertyDescriptor;

  constructor() {
    // eslint-disable-next-line @typescript-eslint/no-this-alias -- the accessor's `this` is the job
    const queue = this;
    this.waitingProp = {
      get(this: QueuedJob) {
        return queue.waitingOf(this.id);
      },
      set(this: QueuedJob, text: string | undefined) {
        const slot = queue.byId.get(this.id);
        if (slot) {
          if (queue.waitingOf(this.id) !== text) queue.shown++;
          slot.text = text;
          slot.at = ++queue.said;
          slot.list.group.ownAt = slot.at;
        }
      },
      enumerable: true,
      configurable: true,
    };
  }
  /** A group's shared routing spec → its key: a started job finds its group without a new key. */
  private readonly keyOf = new WeakMap<QueuedJobSpec, string>();
  /** group key → owner → that owner's jobs of the group now running; kept while the group is empty. */
  private readonly loads = new Map<string, Map<string, OwnerLoad>>();
  private starts = 0;

  get size(): number {
    return this.byId.size;
  }

  /**
   * A count that moves whenever a job is added or removed or a reason shown may read differently
   * (it may move without a visible change, never the other way round): a live page compares it
   * instead of every queued job's id and reason, which at a million jobs is a 40 MB string.
   */
  get changes(): number {
    return this.shown;
  }

  has(id: string): boolean {
    return this.byId.has(id);
  }

  get(id: string): QueuedJob | undefined {
    return this.byId.get(id)?.list.jobs.get(id);
  }

  /** The key of the group a queued job sits in. */
  groupOf(id: string): string | undefined {
    return this.byId.get(id)?.list.group.key;
  }

  /** Why a queued job waits: its group's reason, unless the job was given its own since. */
  private waitingOf(id: string): string | undefined {
    const slot = this.byId.get(id);
    if (!slot) return undefined;
    const g = slot.list.group;
    return g.reasonAt > slot.at ? g.reason : slot.text;
  }

  /**
   * Every job of the group waits for `reason` now, except `keep` (jobs whose own reason stands, such
   * as those being provisioned): O(keep), not a write per job.
   */
  setGroupReason(group: QueueGroup, reason: string, keep: Iterable<string> = NO_KEEP): void {
    const g = this.groups.get(group.key);
    if (!g || g.view !== group) return;
    // The spared keep what they show now, said after the group's reason so theirs wins. Most
    // groups spare none, and make no list for it.
    let spared: [Slot, string | undefined][] | undefined;
    if (!(Array.isArray(keep) && keep.length === 0))
      for (const id of keep) {
        const slot = this.byId.get(id);
        if (slot?.list.group === g) (spared ??= []).push([slot, this.waitingOf(id)]);
      }
    // Shown differently if the text is new, or if a job's own reason said since the last one yields.
    if (g.reason !== reason || g.ownAt > g.reasonAt) this.shown++;
    g.reason = reason;
    g.reasonAt = ++this.said;
    if (spared)
      for (const [slot, text] of spared) {
        slot.text = text;
        slot.at = ++this.said;
        g.ownAt = slot.at;
      }
  }

  add(job: QueuedJob): void {
    this.addOne(job);
  }

  /**
   * Several jobs at once (a submit, a re-read of the store): jobs older than their list's last one
   * are put in place with one re-sort per list for the batch, not one per job.
   */
  addMany(jobs: Iterable<QueuedJob>): void {
    const late = new Map<SeqList, QueuedJob[]>();
    for (const job of jobs) this.addOne(job, late);
    for (const [list, js] of late) list.jobs.place(js);
  }

  private addOne(job: QueuedJob, late?: Map<SeqList, QueuedJob[]>): void {
    if (this.byId.has(job.id)) return;
    const key = groupKey(job);
    let g = this.groups.get(key);
    if (!g) {
      g = newGroup(key, job, this.born++, (x) => this.ordered(x));
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
      fifo = { jobs: new SeqMap(), group: g, priority: prio(job), owner: ownerOf(job) };
      level.set(ownerOf(job), fifo);
    }
    // A requeued job goes back to its place, not to the end.
    pushInOrder(fifo, job, late);
    // The reason it brings (a requeue's, say) is its own, said now: its group's older one yields.
    this.byId.set(job.id, { list: fifo, text: job.waiting, at: ++this.said });
    g.ownAt = this.said;
    this.shown++;
    Object.defineProperty(job, 'waiting', this.waitingProp);
  }

  remove(id: string): QueuedJob | undefined {
    const fifo = this.byId.get(id)?.list;
    const job = fifo?.jobs.get(id);
    if (!fifo || !job) return undefined;
    const group = fifo.group;
    // The job leaves with the reason it showed last, as a plain field again.
    const value = this.waitingOf(id);
    Object.defineProperty(job, 'waiting', { value, writable: true, enumerable: true, configurable: true });
    this.byId.delete(id);
    this.shown++;
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

  private keyFor(job: QueuedJob): string {
    return this.keyOf.get(job.spec) ?? groupKey(job);
  }

  /** The first `n` queued jobs of the group `job` belongs to, in dispatch order. */
  nextOf(job: QueuedJob, n: number): QueuedJob[] {
    const g = this.groups.get(this.keyFor(job));
    const out: QueuedJob[] = [];
    if (!g || n <= 0) return out;
    for (const j of this.ordered(g)) if (out.push(j) >= n) break;
    return out;
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
    return fairOrder(g, this.loads.get(g.key), this.starts);
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
