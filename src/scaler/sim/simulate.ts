import {
  canonicalizeLabels,
  normalizeLabelSet,
  warmSkipReason,
  type ScalerConfig,
} from '../../config/index.js';
import { ProvisionBackoff } from '../core/backoff.js';
import { CapBook } from '../core/caps.js';
import { decide, type DecideState } from '../core/decide.js';
import { resolveResources, type ResourceAmount } from '../core/resources.js';
import { buildRoutingTable, findLabelSet, type RoutableLabelSet } from '../core/routing.js';
import { ScalerState } from '../state.js';
import { WARM_TICK_MS } from '../warm-pool.js';
import { WarmTarget } from './warm-target.js';
import { EventQueue } from './event-queue.js';
import { newCounters } from './stats.js';
import { Timeline } from './timeline.js';
import type { TraceJob } from './trace.js';
import type { Agent, Ev, Group, Pool, SimOptions, SimRaw, Usage } from './model.js';

export type { SimOptions, SimRaw, Usage } from './model.js';

/**
 * A what-if replay of a trace on a virtual clock. Every spawn goes through the scaler's own
 * decision (`decide()`, the caps book, the routing table): the simulator only supplies the facts
 * (time, agent counts) and plays the parts the outside world plays — a spawn takes the backend's
 * spawn time, a job runs for its traced run time, an agent leaves after its one job.
 */

export function simulate(config: ScalerConfig, trace: readonly TraceJob[], opts: SimOptions): SimRaw {
  const idleMs = opts.agentIdleMs ?? 5_000;
  const releaseMs = opts.releaseMs ?? 0;
  const state = new ScalerState(config, []);
  // Routing must not depend on the machine the simulation runs on.
  const table = buildRoutingTable(config, { host: { os: 'linux', arch: 'x64' } });
  const caps = new CapBook(state.capLimits());
  const backoff = new ProvisionBackoff();
  const entries = new Map(config.scalers.map((e) => [e.name, e]));
  const pools = new Map<string, Pool>();
  const perScaler = new Map<string, number>();
  const semaphores = new Map<string, { running: number; waiting: Agent[] }>();
  let live = 0;
  let agentSeq = 0;
  const events = new EventQueue<Ev>();
  const groups = new Map<string, Group>();
  const groupOrder: Group[] = [];
  const submit = new Float64Array(trace.length);
  const runMs = new Float64Array(trace.length);
  let skipped = 0;
  let unserved = 0;
  let waiting = 0;
  let running = 0;
  const startMs = trace.length ? trace[0]!.submitMs : 0;
  const endHint = trace.length ? trace[trace.length - 1]!.submitMs : 0;
  const timeline = new Timeline(startMs, Math.max(endHint - startMs, 1), opts.timelinePoints ?? 240);

  const poolOf = (m: RoutableLabelSet): Pool => {
    const key = `${m.scalerName}/${m.key}`;
    let p = pools.get(key);
    if (!p) {
      const entry = entries.get(m.scalerName)!;
      const ls = entry.labelSets[m.index]!;
      const warmOn = entry.warmPool?.enabled && !warmSkipReason(ls, config.defaults);
      const warmTarget = new WarmTarget(
        warmOn ? entry.warmPool!.size : 0,
        warmOn ? entry.warmPool!.schedule : undefined,
      );
      p = {
        entry,
        match: m,
        c: newCounters(m.scalerName, m.key),
        idle: new Set(),
        warmIdle: 0,
        warmPending: 0,
        warmSize: warmTarget.at(startMs),
        warmTarget,
        groups: [],
      };
      pools.set(key, p);
    }
    return p;
  };
  for (const m of table) poolOf(m);
  const hasWarm = [...pools.values()].some((p) => p.warmTarget.everWarm);
  const maxSpawnMs = () => Math.max(0, ...config.scalers.map((e) => opts.spawnMs(e)));
  const alive = new Set<Agent>();

  const usage = new Map<string, Usage>();
  const peaks = new Map<string, Usage>();
  const use = (name: string, r: ResourceAmount, sign: 1 | -1) => {
    for (const key of [name, '']) {
      let u = usage.get(key);
      if (!u) usage.set(key, (u = { agents: 0, cpus: 0, memBytes: 0 }));
      u.agents += sign;
      u.cpus = u.agents ? u.cpus + sign * r.cpus : 0;
      u.memBytes = u.agents ? u.memBytes + sign * r.memBytes : 0;
      let pk = peaks.get(key);
      if (!pk) peaks.set(key, (pk = { agents: 0, cpus: 0, memBytes: 0 }));
      pk.agents = Math.max(pk.agents, u.agents);
      pk.cpus = Math.max(pk.cpus, u.cpus);
      pk.memBytes = Math.max(pk.memBytes, u.memBytes);
    }
  };
  let current: Group | undefined;
  const requestsFor = (m: RoutableLabelSet, res: TraceJob['resources']) =>
    resolveResources(
      res,
      entries.get(m.scalerName)!.labelSets[m.index]?.resources,
      config.defaults?.resources,
    ).requests;
  const ds: DecideState = {
    now: 0,
    draining: false,
    table,
    isProvisioning: () => false,
    backoff: (key, now) => backoff.check(key, now),
    hasBackend: (name) => entries.has(name),
    requests: (m) => requestsFor(m, current?.resources),
    caps,
    live: (name) => ({ global: live, scaler: perScaler.get(name) ?? 0 }),
    machinePool: () => undefined,
    quiet: true,
  };

  const spawn = (p: Pool, requests: ResourceAmount, now: number, g: Group | undefined): boolean => {
    const id = `sim-${agentSeq++}`;
    const name = p.entry.name;
    const res = caps.reserve(
      { agentId: id, scalerName: name, requests, limits: requests },
      { global: live, scaler: perScaler.get(name) ?? 0 },
    );
    if (!res.ok) return false;
    const a: Agent = { id, pool: p, group: g, warm: !g, requests, bornMs: now };
    live++;
    alive.add(a);
    perScaler.set(name, (perScaler.get(name) ?? 0) + 1);
    use(name, requests, 1);
    const c = p.c;
    c.agents++;
    c.cpus += requests.cpus;
    c.memBytes += requests.memBytes;
    if (c.agents > c.peakAgents) c.peakAgents = c.agents;
    if (c.cpus > c.peakCpus) c.peakCpus = c.cpus;
    if (c.memBytes > c.peakMemBytes) c.peakMemBytes = c.memBytes;
    timeline.agents(now, live);
    if (g) {
      g.inflight++;
      if (g.blocked > 0) g.blocked--;
      c.spawns++;
    } else {
      p.warmPending++;
      c.warmSpawns++;
    }
    let sem = semaphores.get(name);
    if (!sem) semaphores.set(name, (sem = { running: 0, waiting: [] }));
    if (sem.running < p.entry.maxConcurrentSpawns) {
      sem.running++;
      events.push(now + opts.spawnMs(p.entry), { k: 'registered', a });
    } else sem.waiting.push(a);
    return true;
  };

  const leave = (a: Agent, now: number) => {
    caps.release(a.id);
    alive.delete(a);
    live--;
    const name = a.pool.entry.name;
    use(name, a.requests, -1);
    perScaler.set(name, perScaler.get(name)! - 1);
    const c = a.pool.c;
    c.agents--;
    c.cpus = c.agents ? c.cpus - a.requests.cpus : 0;
    c.memBytes = c.agents ? c.memBytes - a.requests.memBytes : 0;
    c.agentMs += now - a.bornMs;
    timeline.agents(now, live);
  };

  const start = (a: Agent, g: Group, now: number) => {
    const j = g.queue.pop()!.item;
    waiting--;
    running++;
    const wait = now - submit[j]!;
    a.pool.c.waits.push(wait);
    timeline.wait(now, wait);
    events.push(now + runMs[j]!, { k: 'done', a });
  };

  let warmAsked = false;
  const askWarm = (now: number) => {
    if (warmAsked) return;
    warmAsked = true;
    events.push(now, { k: 'warm', tick: false });
  };
  const warmPass = (now: number) => {
    for (const p of pools.values()) {
      const size = p.warmTarget.at(now);
      // A scheduled drop frees idle warm agents at once, as the orchestrator's pools do.
      for (const a of [...p.idle]) {
        if (p.warmIdle <= size) break;
        if (!a.warm) continue;
        p.idle.delete(a);
        p.warmIdle--;
        leave(a, now);
      }
      p.warmSize = size;
      let deficit = p.warmSize - p.warmIdle - p.warmPending;
      while (deficit-- > 0 && spawn(p, requestsFor(p.match, undefined), now, undefined));
    }
  };

  const dispatch = (now: number) => {
    ds.now = now;
    // The dispatcher serves the whole queue in order (priority, then submission), not group by group.
    const order = groupOrder.filter((g) => g.queue.size > 0);
    if (order.length > 1) order.sort((x, y) => headRank(x) - headRank(y));
    for (const g of order) {
      const p = g.pool;
      if (!p) continue;
      while (g.queue.size > 0 && p.idle.size > 0) {
        const a: Agent = p.idle.values().next().value!;
        p.idle.delete(a);
        if (a.warm) {
          p.warmIdle--;
          a.warm = false;
          askWarm(now);
        }
        if (g.blocked > 0) g.blocked--;
        start(a, g, now);
      }
      let need = g.queue.size - g.inflight;
      current = g;
      while (need > 0) {
        const d = decide({ labels: g.labels }, ds);
        if (d.action !== 'spawn' || !spawn(p, d.requests!, now, g)) {
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
  };

  const registered = (a: Agent, now: number) => {
    const sem = semaphores.get(a.pool.entry.name)!;
    const next = sem.waiting.shift();
    if (next) events.push(now + opts.spawnMs(next.pool.entry), { k: 'registered', a: next });
    else sem.running--;
    const p = a.pool;
    if (a.group) a.group.inflight--;
    else p.warmPending--;
    const own = a.group && a.group.queue.size > 0 && !a.warm ? a.group : undefined;
    const g = own ?? p.groups.find((x) => x.queue.size > 0);
    if (g && !a.warm) return start(a, g, now);
    if (g && a.warm) {
      a.warm = false;
      askWarm(now);
      return start(a, g, now);
    }
    p.idle.add(a);
    if (a.warm) p.warmIdle++;
    else events.push(now + idleMs, { k: 'idle-exit', a });
  };

  let next = 0;
  let lastMs = startMs;
  // The pools were full before the trace began (the orchestrator had been up a while).
  if (trace.length && hasWarm) events.push(startMs - 1 - maxSpawnMs(), { k: 'warm', tick: true });
  while (next < trace.length || events.size > 0) {
    const t = Math.min(events.peekTime(), next < trace.length ? trace[next]!.submitMs : Infinity);
    if (t === Infinity) break;
    lastMs = t;
    // Everything due at this instant first, then one dispatch pass.
    while (next < trace.length && trace[next]!.submitMs === t) addJob(next++);
    while (events.peekTime() === t) {
      const e = events.pop()!.item;
      if (e.k === 'registered') registered(e.a, t);
      else if (e.k === 'done') {
        running--;
        if (releaseMs > 0) events.push(t + releaseMs, { k: 'gone', a: e.a });
        else leave(e.a, t);
      } else if (e.k === 'gone') leave(e.a, t);
      else if (e.k === 'idle-exit') {
        if (e.a.pool.idle.delete(e.a)) leave(e.a, t);
      } else {
        if (!e.tick) warmAsked = false;
        warmPass(t);
        // Ticks stop once nothing else can happen: jobs a cap never admits must not spin forever.
        if (e.tick && (next < trace.length || running > 0 || events.size > 0)) {
          events.push(t + WARM_TICK_MS, { k: 'warm', tick: true });
          // A schedule's moment between two ticks gets its own pass, as the pools' timer gives it.
          const change = Math.min(...[...pools.values()].map((p) => p.warmTarget.nextChangeMs));
          if (change > t && change < t + WARM_TICK_MS) events.push(change, { k: 'warm', tick: false });
        }
      }
    }
    dispatch(t);
    if (next >= trace.length && waiting === 0 && running === 0 && !hasPendingSpawns()) break;
  }
  unserved += waiting;
  for (const a of alive) leave(a, lastMs);

  function headRank(g: Group): number {
    return g.queue.peekTime() * trace.length + g.queue.peek()!;
  }

  function hasPendingSpawns(): boolean {
    for (const g of groupOrder) if (g.inflight > 0) return true;
    return false;
  }

  function addJob(i: number): void {
    const j = trace[i]!;
    if (j.runMs === null) {
      skipped++;
      return;
    }
    const labels = canonicalizeLabels(j.labels);
    const key = `${normalizeLabelSet(labels)}|${j.resources ? JSON.stringify(j.resources) : ''}`;
    let g = groups.get(key);
    if (!g) {
      const match = findLabelSet({ labels }, table);
      const pool = match && poolOf(match);
      g = {
        labels,
        resources: j.resources,
        match,
        pool,
        queue: new EventQueue(),
        inflight: 0,
        blocked: 0,
      };
      pool?.groups.push(g);
      groups.set(key, g);
      groupOrder.push(g);
    }
    if (!g.pool) {
      unserved++;
      return;
    }
    submit[i] = j.submitMs;
    runMs[i] = j.runMs;
    g.queue.push(-(j.priority ?? 0), i);
    waiting++;
  }

  return {
    pools: [...pools.values()].map((p) => p.c).sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0)),
    replayed: trace.length - skipped - unserved,
    skipped,
    unserved,
    startMs,
    endMs: lastMs,
    timeline,
    scalerPeaks: Object.fromEntries([...peaks].filter(([k]) => k !== '')),
    globalPeak: peaks.get('') ?? { agents: 0, cpus: 0, memBytes: 0 },
  };
}
