import type { Agent, Group } from './model.js';
import type { SimWorld } from './world.js';

/**
 * When the simulated agents move: the dispatch pass (idle agents take jobs, then `decide()` is
 * asked for a spawn per job still without one), an agent's registration, and the warm pools'
 * pass. Each plays the part the orchestrator's own loop plays at the same moment.
 */

export function warmPass(w: SimWorld, now: number): void {
  for (const p of w.pools.values()) {
    const size = p.warmTarget.at(now);
    // A scheduled drop frees idle warm agents at once, as the orchestrator's pools do.
    for (const a of [...p.idle]) {
      if (p.warmIdle <= size) break;
      if (!a.warm) continue;
      p.idle.delete(a);
      p.warmIdle--;
      w.leave(a, now);
    }
    p.warmSize = size;
    let deficit = p.warmSize - p.warmIdle - p.warmPending;
    while (deficit-- > 0 && w.spawn(p, w.requestsFor(p.match, undefined), now, undefined));
  }
}

export function dispatch(w: SimWorld, now: number): void {
  // The dispatcher serves the whole queue in order (priority, then submission), not group by group.
  const order = w.groupOrder.filter((g) => g.queue.size > 0);
  if (order.length > 1) {
    const n = w.trace.length;
    const rank = (g: Group) => g.queue.peekTime() * n + g.queue.peek()!;
    order.sort((x, y) => rank(x) - rank(y));
  }
  for (const g of order) {
    const p = g.pool;
    if (!p) continue;
    while (g.queue.size > 0 && p.idle.size > 0) {
      const a: Agent = p.idle.values().next().value!;
      p.idle.delete(a);
      if (a.warm) {
        p.warmIdle--;
        a.warm = false;
        w.askWarm(now);
      }
      if (g.blocked > 0) g.blocked--;
      w.start(a, g, now);
    }
    let need = g.queue.size - g.inflight;
    while (need > 0) {
      const d = w.decideFor(g, now);
      if (d.action !== 'spawn' || !w.spawn(p, d.requests!, now, g)) {
        // Queues are served oldest first, so the jobs already counted are the first `blocked` of them.
        if (need > g.blocked) {
          p.c.capDelayed += need - g.blocked;
          g.blocked = need;
        }
        break;
      }
      need--;
    }
  }
}

/** An agent registered: it takes a job of its own group, else any of its pool's, else waits idle. */
export function registered(w: SimWorld, a: Agent, now: number): void {
  w.spawned(a, now);
  const p = a.pool;
  if (a.group) a.group.inflight--;
  else p.warmPending--;
  const own = a.group && a.group.queue.size > 0 && !a.warm ? a.group : undefined;
  const g = own ?? p.groups.find((x) => x.queue.size > 0);
  if (g && !a.warm) return w.start(a, g, now);
  if (g && a.warm) {
    a.warm = false;
    w.askWarm(now);
    return w.start(a, g, now);
  }
  p.idle.add(a);
  if (a.warm) p.warmIdle++;
  else w.events.push(now + w.idleMs, { k: 'idle-exit', a });
}
