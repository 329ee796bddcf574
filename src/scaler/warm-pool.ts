import { nextWarmChange, warmSizeAt, type WarmChange } from '../config/warm-schedule.js';
import type { Clock } from '../util/clock.js';
import { errorMessage } from '../util/errors.js';
import type { Logger } from '../util/logger.js';
import { isWarmStock, type ManagedEntry } from './agent-book.js';
import { isPending } from './agent-lifecycle.js';
import { backoffKey } from './core/backoff.js';
import type { ResourceAmount } from './core/resources.js';
import type { RoutableLabelSet } from './core/routing.js';
import type { WarmPoolHost } from './lifecycle-port.js';
import {
  warmDeficit,
  warmPoolSpecs,
  warmSurplus,
  type RegistryView,
  type SkippedWarmSet,
  type WarmPoolSpec,
} from './warm-pool-specs.js';
import { WARM_TICK_MS, WarmPoolTimers } from './warm-pool-timers.js';

export {
  warmDeficit,
  warmSurplus,
  type RegistryView,
  type SkippedWarmSet,
  type WarmPoolSpec,
} from './warm-pool-specs.js';
export { WARM_TICK_MS } from './warm-pool-timers.js';

/**
 * Warm pools: per label set, keep `size` pre-spawned agents idle so a job starts without a spawn.
 * Warm agents hold reservations like any other agent, so they count against every cap. Taking one
 * triggers a replenish; idle agents beyond the size are reaped after `idleTimeoutSeconds`.
 */
export class WarmPools {
  private pools = new Map<string, WarmPoolSpec>();
  private skippedSets: SkippedWarmSet[] = [];
  /** Jobs a warm agent is being retired for: one retire per job until its teardown is done. */
  private readonly yieldingFor = new Set<string>();
  /** Pools that gave an agent up to real work do not refill it before this time. */
  private readonly holdUntil = new Map<string, number>();
  private registry: RegistryView | undefined;
  /** The periodic pass, the prompt one, and the one at each schedule moment. */
  private readonly timers: WarmPoolTimers;
  /** The target each pool had at its last pass: a scheduled drop frees its idle agents at once. */
  private readonly lastTarget = new Map<string, number>();

  constructor(
    private readonly m: WarmPoolHost,
    private readonly clock: Clock,
    private readonly log: Logger,
  ) {
    this.timers = new WarmPoolTimers(
      clock,
      () => {
        let at = Infinity;
        for (const spec of this.pools.values()) at = Math.min(at, this.nextChange(spec)?.atMs ?? Infinity);
        return at;
      },
      () => this.pass(),
    );
    this.configure();
  }

  setRegistry(r: RegistryView): void {
    this.registry = r;
  }

  specs(): WarmPoolSpec[] {
    return [...this.pools.values()];
  }

  /** The size a pool aims for now: its schedule's, or the configured size. */
  targetOf(spec: WarmPoolSpec): number {
    return spec.schedule ? warmSizeAt(spec.schedule, spec.size, this.clock.now()).size : spec.size;
  }

  /** The next scheduled size change of a pool, or null for a pool without a schedule. */
  nextChange(spec: WarmPoolSpec): WarmChange | null {
    return spec.schedule ? nextWarmChange(spec.schedule, this.clock.now()) : null;
  }

  /** Label sets the pools leave cold, with the reason `scaler validate` also warns with. */
  skipped(): SkippedWarmSet[] {
    return [...this.skippedSets];
  }

  /** (Re)build pool specs from the config; dropped or shrunk pools lose their idle agents at once. */
  configure(): void {
    const { pools: next, skipped } = warmPoolSpecs(this.m.state.config, this.log);
    const previous = this.pools;
    this.pools = next;
    this.skippedSets = skipped;
    for (const [key, spec] of previous) {
      const now = next.get(key);
      if (!now) this.reap(spec, 0, true);
      else if (this.targetOf(now) < this.targetOf(spec)) this.reap(now, this.targetOf(now), true);
    }
    this.timers.armBoundary();
  }

  start(): void {
    this.timers.start();
  }

  stop(): void {
    this.timers.stop();
  }

  replenishSoon(): void {
    this.timers.replenishSoon();
  }

  private members(spec: WarmPoolSpec): ManagedEntry[] {
    return this.m.state
      .agentsOf(spec.scalerName)
      .filter((a) => isWarmStock(a) && a.labelSetKey === spec.labelSetKey);
  }

  /** Idle, registered warm agents of this pool: the ones a job could take right now. */
  ready(spec: WarmPoolSpec): ManagedEntry[] {
    return this.members(spec).filter(
      (a) => a.phase === 'registered' && (this.registry?.isIdle(a.agentId) ?? false),
    );
  }

  private reap(spec: WarmPoolSpec, size: number, force: boolean): void {
    const idle = this.ready(spec).map((a) => ({
      agentId: a.agentId,
      idleSinceMs: a.registeredAtMs ?? a.createdAtMs,
    }));
    for (const id of warmSurplus(idle, size, spec.idleTimeoutMs, this.clock.now(), force)) {
      const a = this.m.state.agents.get(id);
      if (!a || !this.registry?.tryDrain(id)) continue;
      this.log.info({ agentId: id, scaler: spec.scalerName }, 'reaping idle warm agent');
      this.m.state.tally.warmReap(spec.scalerName);
      // Reaped because it sat idle past the pool's need, not because anything is shutting down.
      void this.m.teardown(a, 'idle');
    }
  }

  /**
   * Run a pass, single-flight: a pass counts its deficit once and then awaits each spawn, so two
   * passes at once would each fill the same gap. A call made while a pass runs asks for one more
   * pass after it (however many calls came), and resolves when that one is done.
   */
  tick(): Promise<void> {
    return this.timers.tick();
  }

  /** One pass: reap surplus idle agents, then top every pool up within caps and backoff. */
  private async pass(): Promise<void> {
    if (!this.registry) return;
    const now = this.clock.now();
    this.timers.armBoundaryIfNone();
    for (const spec of this.pools.values()) {
      const target = this.targetOf(spec);
      // A schedule that lowered the size wants the room back now, not after the idle timeout.
      const dropped = target < (this.lastTarget.get(spec.key) ?? target);
      this.lastTarget.set(spec.key, target);
      this.reap(spec, target, dropped);
    }
    for (const spec of this.pools.values()) {
      if (this.m.opts.isDraining?.()) return;
      const members = this.members(spec);
      const pending = members.filter((a) => isPending(a.phase)).length;
      let deficit = warmDeficit(this.targetOf(spec), this.ready(spec).length, pending);
      if (deficit === 0 || (this.holdUntil.get(spec.key) ?? 0) > now) continue;
      if (this.m.state.backoff.check(backoffKey(spec.scalerName, spec.labelSetKey), now).blocked) continue;
      const match = this.m.state.table.find(
        (t) => t.scalerName === spec.scalerName && t.index === spec.labelSetIndex,
      );
      if (!match) continue;
      while (deficit-- > 0) {
        try {
          const r = await this.m.provision(match, this.m.resourcesFor(match));
          if (r.action === 'spawning') this.m.state.tally.warmSpawned(spec.scalerName);
          else {
            this.log.info({ pool: spec.key, reason: r.reason }, 'warm spawn refused');
            break;
          }
        } catch (err) {
          this.log.warn({ pool: spec.key, err: errorMessage(err) }, 'warm spawn failed');
          break;
        }
      }
    }
  }

  /**
   * A queued job is held back by a cap (count or resources). If an idle warm agent of another
   * label set holds the room it needs, retire that agent (reason `idle`) so the job can spawn:
   * stock kept for jobs that may come must not starve a job that is here. The freed capacity
   * re-drives the queue; the pool that gave the agent up waits a tick before refilling, so it does
   * not take the room back first. True when an agent is being retired for this job.
   */
  yieldTo(jobId: string, match: RoutableLabelSet, requests: ResourceAmount): boolean {
    if (!this.registry || this.yieldingFor.has(jobId)) return false;
    const s = this.m.state;
    const live = () => ({
      global: s.globalActiveCount(),
      scaler: s.backends.get(match.scalerName)?.getActiveCount() ?? 0,
    });
    if (s.caps.check(match.scalerName, requests, live()).ok) return false;
    const candidates = [...this.pools.values()]
      .filter((p) => p.scalerName !== match.scalerName || p.labelSetKey !== match.key)
      // Only agents whose spawn call has returned and whose registration is over (one registering
      // this instant is still being handled): neither is ours to kill mid-way.
      .flatMap((p) => this.ready(p).map((a) => ({ a, pool: p })))
      .filter(({ a }) => a.backendRef !== undefined && idleSince(a) < this.clock.now())
      .sort((x, y) => idleSince(x.a) - idleSince(y.a));
    for (const { a, pool } of candidates) {
      const book = s.caps.clone();
      book.release(a.agentId);
      const now = live();
      // The retired agent stops counting toward the live figures too once it is destroyed.
      const after = {
        global: now.global - 1,
        scaler: now.scaler - (a.scalerName === match.scalerName ? 1 : 0),
      };
      if (!book.check(match.scalerName, requests, after).ok) continue;
      if (!this.registry.tryDrain(a.agentId)) continue;
      this.yieldingFor.add(jobId);
      this.holdUntil.set(pool.key, this.clock.now() + WARM_TICK_MS);
      this.log.info(
        { agentId: a.agentId, pool: pool.key, jobId, for: `${match.scalerName}|${match.key}` },
        'retiring an idle warm agent: a queued job needs its capacity',
      );
      void this.m.teardown(a, 'idle').finally(() => this.yieldingFor.delete(jobId));
      return true;
    }
    return false;
  }
}

function idleSince(a: ManagedEntry): number {
  return a.registeredAtMs ?? a.createdAtMs;
}
