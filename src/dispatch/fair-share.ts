/**
 * The dispatch order within one label set (one queue group), as pure functions.
 *
 * The rule, applied each time the next job is chosen:
 *  1. Only queued jobs of the highest priority present are eligible.
 *  2. Among the owners of those jobs, the owner with the fewest jobs of this label set running
 *     goes first; on a tie, the owner whose last job here started least recently (never beats
 *     any time); on a further tie, the owner whose oldest eligible job was submitted first.
 *  3. Within the chosen owner, jobs go in submission order.
 * A run without an owner counts as one owner of its own, "" (the unnamed owner).
 */

/** What the rule knows about an owner's work of one label set that already runs. */
export interface OwnerLoad {
  /** Jobs of this owner and label set dispatched and not yet finished. */
  running: number;
  /** A counter value stamped at this owner's latest start here; 0 means never. */
  lastStart: number;
}

export const NO_LOAD: OwnerLoad = { running: 0, lastStart: 0 };

/** An owner that has eligible jobs, with the submission order of its oldest one. */
export interface OwnerHead {
  owner: string;
  headSeq: number;
}

/** True when owner `a` goes before owner `b` (rule 2 above). */
export function ownerBefore(a: OwnerHead, la: OwnerLoad, b: OwnerHead, lb: OwnerLoad): boolean {
  if (la.running !== lb.running) return la.running < lb.running;
  if (la.lastStart !== lb.lastStart) return la.lastStart < lb.lastStart;
  return a.headSeq < b.headSeq;
}

/** The owner to serve next among those with eligible jobs: O(owners). */
export function chooseOwner<H extends OwnerHead>(
  heads: Iterable<H>,
  load: (owner: string) => OwnerLoad,
): H | undefined {
  let best: H | undefined;
  let bestLoad = NO_LOAD;
  for (const h of heads) {
    const l = load(h.owner);
    if (!best || ownerBefore(h, l, best, bestLoad)) {
      best = h;
      bestLoad = l;
    }
  }
  return best;
}

/** A queued job as the rule sees it. */
export interface FairJob {
  id: string;
  seq: number;
  priority: number;
  owner: string;
}

/**
 * The reference form of the rule over a plain list: the job to dispatch next, or undefined when
 * none is queued. The queue (job-queue.ts) keeps an index that gives the same answer faster.
 */
export function pickNext<J extends FairJob>(
  queued: readonly J[],
  load: (owner: string) => OwnerLoad,
): J | undefined {
  let top = -Infinity;
  for (const j of queued) if (j.priority > top) top = j.priority;
  const heads = new Map<string, OwnerHead & { job: J }>();
  for (const j of queued) {
    if (j.priority !== top) continue;
    const h = heads.get(j.owner);
    if (!h || j.seq < h.headSeq) heads.set(j.owner, { owner: j.owner, headSeq: j.seq, job: j });
  }
  return chooseOwner(heads.values(), load)?.job;
}
