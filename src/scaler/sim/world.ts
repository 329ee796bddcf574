import {
  canonicalizeLabels,
  normalizeLabelSet,
  warmSkipReason,
  type ScalerConfig,
  type ScalerEntry,
} from '../../config/index.js';
import { ProvisionBackoff } from '../core/backoff.js';
import { CapBook } from '../core/caps.js';
import { decide, type DecideState, type Decision } from '../core/decide.js';
import { resolveResources, type ResourceAmount } from '../core/resources.js';
import { buildRoutingTable, findLabelSet, type RoutableLabelSet } from '../core/routing.js';
import { ScalerState } from '../state.js';
import { EventQueue } from './event-queue.js';
import type { Agent, Ev, Group, Pool, SimOptions } from './model.js';
import { newCounters } from './stats.js';
import { Timeline } from './timeline.js';
import type { TraceJob } from './trace.js';
import { UsageBook } from './usage.js';
import { WarmTarget } from './warm-target.js';

/**
 * The simulated world: the scaler's own caps book and routing table, the label-set pools, the job
 * groups, the agents alive and the event queue, with the moves an agent makes (spawn, start a
 * job, leave). What decides when those moves happen is in `scheduling.ts`.
 */
export class SimWorld {
  private readonly table: readonly RoutableLabelSet[];
  readonly caps: CapBook;
  private readonly entries: ReadonlyMap<string, ScalerEntry>;
  readonly #pools = new Map<string, Pool>();
  readonly events = new EventQueue<Ev>();
  private readonly groups = new Map<string, Group>();
  readonly #groupOrder: Group[] = [];
  private readonly submit: Float64Array;
  private readonly runMs: Float64Array;
  readonly timeline: Timeline;
  readonly #alive = new Set<Agent>();
  readonly usage = new UsageBook();
  private readonly ds: DecideState;
  readonly startMs: number;
  readonly idleMs: number;
  readonly releaseMs: number;
  readonly dispatchMs: number;
  private readonly perScaler = new Map<string, number>();
  private readonly semaphores = new Map<string, { running: number; waiting: Agent[] }>();
  private live = 0;
  private agentSeq = 0;
  /** Spawns started and not registered yet, over all scalers: they share the host's time. */
  private spawning = 0;
  #waiting = 0;
  #running = 0;
  private warmAsked = false;
  /** The group whose jobs `decide()` is asked about (its requests depend on the job's resources). */
  private current: Group | undefined;

  constructor(
    readonly config: ScalerConfig,
    readonly trace: readonly TraceJob[],
    readonly opts: SimOptions,
  ) {
    this.idleMs = opts.agentIdleMs ?? 5_000;
    this.releaseMs = opts.releaseMs ?? 0;
    this.dispatchMs = opts.dispatchMs ?? 0;
    const state = new ScalerState(config, []);
    // Routing must not depend on the machine the simulation runs on.
    this.table = buildRoutingTable(config, { host: { os: 'linux', arch: 'x64' } });
    this.caps = new CapBook(state.capLimits());
    this.entries = new Map(config.scalers.map((e) => [e.name, e]));
    this.submit = new Float64Array(trace.length);
    this.runMs = new Float64Array(trace.length);
    this.startMs = trace.length ? trace[0]!.submitMs : 0;
    const endHint = trace.length ? trace[trace.length - 1]!.submitMs : 0;
    this.timeline = new Timeline(
      this.startMs,
      Math.max(endHint - this.startMs, 1),
      opts.timelinePoints ?? 240,
    );
    const backoff = new ProvisionBackoff();
    this.ds = {
      now: 0,
      draining: false,
      table: this.table,
      isProvisioning: () => false,
      backoff: (key, now) => backoff.check(key, now),
      hasBackend: (name) => this.entries.has(name),
      requests: (m) => this.requestsFor(m, this.current?.resources),
      caps: this.caps,
      live: (name) => ({ global: this.live, scaler: this.perScaler.get(name) ?? 0 }),
      machinePool: () => undefined,
      quiet: true,
    };
    for (const m of this.table) this.poolOf(m);
  }

  get pools(): ReadonlyMap<string, Pool> {
    return this.#pools;
  }
  /** The job groups in the order they were first seen. */
  get groupOrder(): readonly Group[] {
    return this.#groupOrder;
  }
  get alive(): ReadonlySet<Agent> {
    return this.#alive;
  }
  /** Jobs queued and not started. */
  get waiting(): number {
    return this.#waiting;
  }
  /** Jobs started and not done. */
  get running(): number {
    return this.#running;
  }

  /** Trace job `i` joins its group's queue: not when it never ran, nor when no label set serves it. */
  enqueue(i: number): 'queued' | 'skipped' | 'unserved' {
    const j = this.trace[i]!;
    if (j.runMs === null) return 'skipped';
    const g = this.groupOf(j);
    if (!g.pool) return 'unserved';
    this.submit[i] = j.submitMs;
    this.runMs[i] = j.runMs;
    g.queue.push(-(j.priority ?? 0), i);
    this.#waiting++;
    return 'queued';
  }

  /** The group of jobs with this job's labels and resources, made (and routed) when first seen. */
  private groupOf(j: TraceJob): Group {
    const labels = canonicalizeLabels(j.labels);
    const key = `${normalizeLabelSet(labels)}|${j.resources ? JSON.stringify(j.resources) : ''}`;
    let g = this.groups.get(key);
    if (!g) {
      const match = findLabelSet({ labels }, this.table);
      const pool = match && this.poolOf(match);
      g = { labels, resources: j.resources, match, pool, queue: new EventQueue(), inflight: 0, blocked: 0 };
      pool?.groups.push(g);
      this.groups.set(key, g);
      this.#groupOrder.push(g);
    }
    return g;
  }

  /** The scaler's own decision for a job of `g` at `now`, over the world as it stands. */
  decideFor(g: Group, now: number): Decision {
    this.ds.now = now;
    this.current = g;
    return decide({ labels: g.labels }, this.ds);
  }

  poolOf(m: RoutableLabelSet): Pool {
    const key = `${m.scalerName}/${m.key}`;
    let p = this.#pools.get(key);
    if (!p) {
      const entry = this.entries.get(m.scalerName)!;
      const ls = entry.labelSets[m.index]!;
      const warmOn = entry.warmPool?.enabled && !warmSkipReason(ls, this.config.defaults);
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
        warmSize: warmTarget.at(this.startMs),
        warmTarget,
        groups: [],
      };
      this.#pools.set(key, p);
    }
    return p;
  }

  requestsFor(m: RoutableLabelSet, res: TraceJob['resources']): ResourceAmount {
    return resolveResources(
      res,
      this.entries.get(m.scalerName)!.labelSets[m.index]?.resources,
      this.config.defaults?.resources,
    ).requests;
  }

  /** The longest a spawn of any scaler can take: pools are full that long before the trace. */
  maxSpawnMs(): number {
    return Math.max(0, ...this.config.scalers.map((e) => this.spawnTime(e, this.startMs)));
  }

  /** Start an agent through the caps book (false when a cap refuses it); `g` is its job's group. */
  spawn(p: Pool, requests: ResourceAmount, now: number, g: Group | undefined): boolean {
    const id = `sim-${this.agentSeq++}`;
    const name = p.entry.name;
    const res = this.caps.reserve(
      { agentId: id, scalerName: name, requests, limits: requests },
      { global: this.live, scaler: this.perScaler.get(name) ?? 0 },
    );
    if (!res.ok) return false;
    const a: Agent = { id, pool: p, group: g, warm: !g, requests, bornMs: now };
    this.live++;
    this.#alive.add(a);
    this.perScaler.set(name, (this.perScaler.get(name) ?? 0) + 1);
    this.usage.add(name, requests, 1);
    const c = p.c;
    c.agents++;
    c.cpus += requests.cpus;
    c.memBytes += requests.memBytes;
    if (c.agents > c.peakAgents) c.peakAgents = c.agents;
    if (c.cpus > c.peakCpus) c.peakCpus = c.cpus;
    if (c.memBytes > c.peakMemBytes) c.peakMemBytes = c.memBytes;
    this.timeline.agents(now, this.live);
    if (g) {
      g.inflight++;
      if (g.blocked > 0) g.blocked--;
      c.spawns++;
    } else {
      p.warmPending++;
      c.warmSpawns++;
    }
    let sem = this.semaphores.get(name);
    if (!sem) this.semaphores.set(name, (sem = { running: 0, waiting: [] }));
    if (sem.running < p.entry.maxConcurrentSpawns) {
      sem.running++;
      this.launch(a, now);
    } else sem.waiting.push(a);
    return true;
  }

  /** An agent registered: its backend's spawn slot goes to the next spawn waiting for one. */
  spawned(a: Agent, now: number): void {
    this.spawning--;
    const sem = this.semaphores.get(a.pool.entry.name)!;
    const next = sem.waiting.shift();
    if (next) this.launch(next, now);
    else sem.running--;
  }

  leave(a: Agent, now: number): void {
    this.caps.release(a.id);
    this.#alive.delete(a);
    this.live--;
    const name = a.pool.entry.name;
    this.usage.add(name, a.requests, -1);
    this.perScaler.set(name, this.perScaler.get(name)! - 1);
    const c = a.pool.c;
    c.agents--;
    c.cpus = c.agents ? c.cpus - a.requests.cpus : 0;
    c.memBytes = c.agents ? c.memBytes - a.requests.memBytes : 0;
    c.agentMs += now - a.bornMs;
    this.timeline.agents(now, this.live);
  }

  /** The agent takes the oldest job of the highest priority in `g`; it starts after the hand-over. */
  start(a: Agent, g: Group, now: number): void {
    const j = g.queue.pop()!.item;
    this.#waiting--;
    this.#running++;
    const at = now + this.dispatchMs;
    const wait = at - this.submit[j]!;
    a.pool.c.waits.push(wait);
    this.timeline.wait(at, wait);
    this.events.push(at + this.runMs[j]!, { k: 'done', a });
  }

  /** The agent's job is done: its capacity is free again after the release time. */
  finish(a: Agent, now: number): void {
    this.#running--;
    const release = this.releaseAt(a.pool.entry, now);
    if (release > 0) this.events.push(now + release, { k: 'gone', a });
    else this.leave(a, now);
  }

  askWarm(now: number): void {
    if (this.warmAsked) return;
    this.warmAsked = true;
    this.events.push(now, { k: 'warm', tick: false });
  }

  /** The pass `askWarm` asked for runs now: a later ask queues another. */
  warmAnswered(): void {
    this.warmAsked = false;
  }

  private launch(a: Agent, now: number): void {
    this.spawning++;
    this.events.push(now + this.spawnTime(a.pool.entry, now), { k: 'registered', a });
  }

  private spawnTime(e: ScalerEntry, now: number): number {
    return this.opts.spawnMs(e, now);
  }

  /** From a job's end at `now` until the capacity of this scaler's agent is free again. */
  releaseAt(e: ScalerEntry, now: number): number {
    return this.opts.releaseAt ? this.opts.releaseAt(e, now) : this.releaseMs;
  }
}
