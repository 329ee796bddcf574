import type { FreeAgents } from '../scaler/core/plan.js';

/** What the index reads of an agent (the registry's connected agent has these and more). */
export interface IndexedAgent {
  readonly id: string;
  readonly kind: 'static' | 'scaler';
  readonly labels: ReadonlySet<string>;
  readonly gate: readonly string[];
  readonly version?: string | undefined;
  readonly boundJobId?: string | undefined;
}

/** Connected agents of one shape, in the order they joined the registry. */
interface Bucket<ConnectedAgent> {
  agents: Map<ConnectedAgent, number>;
  /** The highest join number in `agents`: an insert below it must re-sort the bucket. */
  last: number;
}

/**
 * The registry's connected agents, arranged so that a dispatch finds the agent it would pick from
 * the full list (static agents first, then in the order they joined) without listing the fleet.
 *
 * Static agents are grouped by shape (labels, gate, version): whether such an agent can run a job
 * depends on nothing else, so a dispatch asks once per shape and then takes the earliest free
 * agent among the shapes that fit. Scaler agents are asked one by one (the scaler may refuse a
 * particular agent), after every static one, as before.
 *
 * Availability (busy, draining, held, used single-use) is read when a dispatch looks, not tracked:
 * it is changed in many places, and an index that missed one change would hide an agent or offer a
 * busy one. Busy agents are skipped as a dispatch walks a shape, so the walk costs the busy agents
 * ahead of the first free one, never a listing and sort of every idle agent.
 */
export class IdleIndex<ConnectedAgent extends IndexedAgent> {
  private readonly order = new Map<string, number>();
  private readonly shapes = new Map<string, Bucket<ConnectedAgent>>();
  private readonly shapeOf = new Map<ConnectedAgent, string>();
  private readonly scaled = new Map<ConnectedAgent, number>();
  private scaledLast = -1;
  private joined = 0;

  /** An agent joins, or replaces the connection of the same id (which keeps its place in line). */
  join(agent: ConnectedAgent, replaces?: ConnectedAgent): void {
    if (replaces) this.detach(replaces);
    let seq = this.order.get(agent.id);
    if (seq === undefined) this.order.set(agent.id, (seq = this.joined++));
    if (agent.kind !== 'static') {
      insert(
        this.scaled,
        agent,
        seq,
        () => this.scaledLast,
        (v) => (this.scaledLast = v),
      );
      return;
    }
    const key = shapeKey(agent);
    let b = this.shapes.get(key);
    if (!b) this.shapes.set(key, (b = { agents: new Map(), last: -1 }));
    const bucket = b;
    this.shapeOf.set(agent, key);
    insert(
      bucket.agents,
      agent,
      seq,
      () => bucket.last,
      (v) => (bucket.last = v),
    );
  }

  /** The agent left the registry: it loses its place in line. */
  leave(agent: ConnectedAgent): void {
    this.order.delete(agent.id);
    this.detach(agent);
  }

  private detach(agent: ConnectedAgent): void {
    if (this.scaled.delete(agent)) return;
    const key = this.shapeOf.get(agent);
    if (key === undefined) return;
    this.shapeOf.delete(agent);
    const b = this.shapes.get(key)!;
    b.agents.delete(agent);
    if (!b.agents.size) this.shapes.delete(key);
  }

  /** Is any agent free? Stops at the first free one. */
  anyFree(isFree: (a: ConnectedAgent) => boolean): boolean {
    for (const b of this.shapes.values()) for (const a of b.agents.keys()) if (isFree(a)) return true;
    for (const a of this.scaled.keys()) if (isFree(a)) return true;
    return false;
  }

  /** The free agents for one planning pass; each is taken at most once in it. */
  free(isFree: (a: ConnectedAgent) => boolean): FreeAgents<ConnectedAgent> {
    const taken = new Set<ConnectedAgent>();
    const open = (a: ConnectedAgent) => isFree(a) && !taken.has(a);
    // Counted once, on the first ask, then kept by the picks: a pass asks once per group.
    let left: number | undefined;
    return {
      none: () => {
        if (left === undefined) {
          left = 0;
          for (const b of this.shapes.values()) for (const a of b.agents.keys()) if (open(a)) left++;
          for (const a of this.scaled.keys()) if (open(a)) left++;
        }
        return left === 0;
      },
      matching: (fits) => {
        // One walker per shape that fits; each walker only moves forward (taken agents stay taken).
        const walkers: {
          seq: Map<ConnectedAgent, number>;
          it: Iterator<ConnectedAgent>;
          head?: ConnectedAgent;
        }[] = [];
        for (const b of this.shapes.values()) {
          const rep = b.agents.keys().next().value!;
          if (fits(rep)) walkers.push({ seq: b.agents, it: b.agents.keys() });
        }
        const headOf = (w: (typeof walkers)[number]) => {
          while (w.head === undefined || !open(w.head)) {
            const r = w.it.next();
            if (r.done) return undefined;
            w.head = r.value;
          }
          return w.head;
        };
        return () => {
          let best: ConnectedAgent | undefined;
          let bestSeq = Infinity;
          for (const w of walkers) {
            const h = headOf(w);
            if (h !== undefined && w.seq.get(h)! < bestSeq) [best, bestSeq] = [h, w.seq.get(h)!];
          }
          if (best === undefined)
            for (const a of this.scaled.keys())
              if (open(a) && fits(a)) {
                best = a;
                break;
              }
          if (best !== undefined) {
            taken.add(best);
            if (left !== undefined) left--;
          }
          return best;
        };
      },
    };
  }
}

/** What makes two static agents interchangeable to `canAgentRunJob`. */
function shapeKey(a: IndexedAgent): string {
  return JSON.stringify([a.version ?? null, [...a.labels].sort(), [...a.gate].sort(), a.boundJobId ?? null]);
}

/** Insert in join order; a replacement joining under an earlier number re-sorts its map (rare). */
function insert<ConnectedAgent>(
  m: Map<ConnectedAgent, number>,
  agent: ConnectedAgent,
  seq: number,
  last: () => number,
  setLast: (v: number) => void,
): void {
  m.set(agent, seq);
  if (seq >= last()) return setLast(seq);
  const all = [...m].sort((x, y) => x[1] - y[1]);
  m.clear();
  for (const [a, s] of all) m.set(a, s);
}
