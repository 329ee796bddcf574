/**
 * A simulated pool's warm size over virtual time: the plain size, or its schedule's. The size is
 * looked up again only once the moment it was valid until has passed, so a year of 30-second
 * ticks costs one cron lookup per schedule change, not one per tick.
 */
import {
  compileWarmSchedule,
  nextWarmChange,
  warmSizeAt,
  type CompiledWarmSchedule,
  type WarmScheduleEntry,
} from '../../config/warm-schedule.js';

export class WarmTarget {
  private readonly schedule: CompiledWarmSchedule | undefined;
  private size: number;
  private validUntil = -Infinity;

  constructor(
    private readonly plain: number,
    entries: readonly WarmScheduleEntry[] | undefined,
  ) {
    this.schedule = entries?.length ? compileWarmSchedule(entries) : undefined;
    this.size = plain;
  }

  /** Whether this pool ever keeps an agent warm. */
  get everWarm(): boolean {
    return this.plain > 0 || (this.schedule?.entries.some((e) => e.size > 0) ?? false);
  }

  at(nowMs: number): number {
    if (!this.schedule || nowMs < this.validUntil) return this.size;
    this.size = warmSizeAt(this.schedule, this.plain, nowMs).size;
    this.validUntil = nextWarmChange(this.schedule, nowMs)?.atMs ?? Infinity;
    return this.size;
  }

  /** The next moment the size may change, or Infinity. Valid after a call to `at`. */
  get nextChangeMs(): number {
    return this.schedule ? this.validUntil : Infinity;
  }
}
