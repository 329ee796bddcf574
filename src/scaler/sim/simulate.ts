import type { ScalerConfig } from '../../config/index.js';
import { WARM_TICK_MS } from '../warm-pool.js';
import type { SimOptions, SimRaw } from './model.js';
import { dispatch, registered, warmPass } from './scheduling.js';
import type { TraceJob } from './trace.js';
import { SimWorld } from './world.js';

export type { SimOptions, SimRaw, Usage } from './model.js';

/**
 * A what-if replay of a trace on a virtual clock. Every spawn goes through the scaler's own
 * decision (`decide()`, the caps book, the routing table): the simulator only supplies the facts
 * (time, agent counts) and plays the parts the outside world plays — a spawn takes the backend's
 * spawn time, a job runs for its traced run time, an agent leaves after its one job.
 */
export function simulate(config: ScalerConfig, trace: readonly TraceJob[], opts: SimOptions): SimRaw {
  const w = new SimWorld(config, trace, opts);
  const { events, pools, startMs } = w;
  let skipped = 0;
  let unserved = 0;
  const hasWarm = [...pools.values()].some((p) => p.warmTarget.everWarm);

  const addJob = (i: number): void => {
    const queued = w.enqueue(i);
    if (queued === 'skipped') skipped++;
    else if (queued === 'unserved') unserved++;
  };
  const hasPendingSpawns = (): boolean => w.groupOrder.some((g) => g.inflight > 0);

  let next = 0;
  let lastMs = startMs;
  // The pools were full before the trace began (the orchestrator had been up a while).
  if (trace.length && hasWarm) events.push(startMs - 1 - w.maxSpawnMs(), { k: 'warm', tick: true });
  while (next < trace.length || events.size > 0) {
    const t = Math.min(events.peekTime(), next < trace.length ? trace[next]!.submitMs : Infinity);
    if (t === Infinity) break;
    lastMs = t;
    // Everything due at this instant first, then one dispatch pass.
    while (next < trace.length && trace[next]!.submitMs === t) addJob(next++);
    while (events.peekTime() === t) {
      const e = events.pop()!.item;
      if (e.k === 'registered') registered(w, e.a, t);
      else if (e.k === 'done') w.finish(e.a, t);
      else if (e.k === 'gone') w.leave(e.a, t);
      else if (e.k === 'idle-exit') {
        if (e.a.pool.idle.delete(e.a)) w.leave(e.a, t);
      } else {
        if (!e.tick) w.warmAnswered();
        warmPass(w, t);
        // Ticks stop once nothing else can happen: jobs a cap never admits must not spin forever.
        if (e.tick && (next < trace.length || w.running > 0 || events.size > 0)) {
          events.push(t + WARM_TICK_MS, { k: 'warm', tick: true });
          // A schedule's moment between two ticks gets its own pass, as the pools' timer gives it.
          const change = Math.min(...[...pools.values()].map((p) => p.warmTarget.nextChangeMs));
          if (change > t && change < t + WARM_TICK_MS) events.push(change, { k: 'warm', tick: false });
        }
      }
    }
    dispatch(w, t);
    if (next >= trace.length && w.waiting === 0 && w.running === 0 && !hasPendingSpawns()) break;
  }
  unserved += w.waiting;
  for (const a of w.alive) w.leave(a, lastMs);

  return {
    pools: [...pools.values()].map((p) => p.c).sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0)),
    replayed: trace.length - skipped - unserved,
    skipped,
    unserved,
    startMs,
    endMs: lastMs,
    timeline: w.timeline,
    scalerPeaks: w.usage.scalerPeaks(),
    globalPeak: w.usage.globalPeak(),
  };
}
