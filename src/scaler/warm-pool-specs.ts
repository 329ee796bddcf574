import { normalizeLabelSet, warmSkipReason, type ScalerConfig } from '../config/index.js';
import { compileWarmSchedule, type CompiledWarmSchedule } from '../config/warm-schedule.js';
import type { Logger } from '../util/logger.js';

/** What the warm pools need to know about connected agents (the dispatcher's registry). */
export interface RegistryView {
  /** Connected and not running a job. */
  isIdle(agentId: string): boolean;
  /** Stop offering the agent work if it is idle; false when it already took a job. */
  tryDrain(agentId: string): boolean;
}

export interface WarmPoolSpec {
  key: string;
  scalerName: string;
  labelSetIndex: number;
  labelSetKey: string;
  /** The configured size: the target while no schedule entry has fired. */
  size: number;
  idleTimeoutMs: number;
  schedule?: CompiledWarmSchedule;
}

/** A label set of a warm-pool scaler that the pool leaves cold, and why (shared with validate). */
export interface SkippedWarmSet {
  scalerName: string;
  labelSetKey: string;
  reason: string;
}

/** Pure: how many warm agents to add, given what is ready and in flight. */
export function warmDeficit(size: number, ready: number, pending: number): number {
  return Math.max(0, size - ready - pending);
}

/** Pure: which idle warm agents to reap (oldest first, only the surplus past the idle timeout). */
export function warmSurplus(
  idle: { agentId: string; idleSinceMs: number }[],
  size: number,
  idleTimeoutMs: number,
  nowMs: number,
  force = false,
): string[] {
  const surplus = idle.length - size;
  if (surplus <= 0) return [];
  return [...idle]
    .sort((a, b) => a.idleSinceMs - b.idleSinceMs)
    .filter((a) => force || nowMs - a.idleSinceMs >= idleTimeoutMs)
    .slice(0, surplus)
    .map((a) => a.agentId);
}

/**
 * One pool per label set of each scaler with a warm pool, keyed `scaler|labels`; a label set the
 * pool cannot keep warm is skipped (and warned about) with the reason `scaler validate` gives.
 */
export function warmPoolSpecs(
  config: ScalerConfig,
  log: Logger,
): { pools: Map<string, WarmPoolSpec>; skipped: SkippedWarmSet[] } {
  const pools = new Map<string, WarmPoolSpec>();
  const skipped: SkippedWarmSet[] = [];
  for (const entry of config.scalers) {
    if (!entry.warmPool?.enabled) continue;
    const sched = entry.warmPool.schedule;
    const schedule = sched?.length ? compileWarmSchedule(sched) : undefined;
    entry.labelSets.forEach((ls, i) => {
      const labelSetKey = normalizeLabelSet(ls.labels);
      const reason = warmSkipReason(ls, config.defaults);
      if (reason) {
        skipped.push({ scalerName: entry.name, labelSetKey, reason });
        log.warn({ scaler: entry.name, labelSet: labelSetKey, reason }, 'warm pool skips a label set');
        return;
      }
      const key = `${entry.name}|${labelSetKey}`;
      pools.set(key, {
        key,
        scalerName: entry.name,
        labelSetIndex: i,
        labelSetKey,
        size: entry.warmPool!.size,
        idleTimeoutMs: entry.warmPool!.idleTimeoutSeconds * 1000,
        ...(schedule ? { schedule } : {}),
      });
    });
  }
  return { pools, skipped };
}
