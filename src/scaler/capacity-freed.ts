import type { Clock, TimerHandle } from '../util/clock.js';
import { errorMessage } from '../util/errors.js';
import type { Logger } from '../util/logger.js';
import type { ScalerTally } from './tally.js';

const CAPACITY_FREED_DEBOUNCE_MS = 25;

/** Who is told that waiting jobs may be offered again (read when the signal fires). */
type CapacityFreedHook = { onCapacityFreed(): void } | undefined;

/**
 * The wake-up for jobs waiting on capacity. Agents are often released several at a time (a shutdown,
 * a sweep), so the first release arms a short timer and the rest ride on it: the waiting jobs are
 * offered again once, not once per released agent.
 */
export class CapacityFreedSignal {
  private timer: TimerHandle | undefined;

  constructor(
    private readonly clock: Clock,
    private readonly log: Logger,
    private readonly tally: ScalerTally,
    private readonly hook: () => CapacityFreedHook,
  ) {}

  notify(): void {
    if (this.timer) return;
    this.timer = this.clock.setTimer(CAPACITY_FREED_DEBOUNCE_MS, () => {
      this.timer = undefined;
      try {
        this.tally.redispatched('hook');
        this.hook()?.onCapacityFreed();
      } catch (err) {
        this.log.error({ err: errorMessage(err) }, 'capacity-freed hook failed');
      }
    });
  }

  /**
   * Drop a pending wake-up (the manager is stopping). The handle is left set, so a notify after a
   * cancelled one finds it armed and arms nothing.
   */
  cancel(): void {
    this.timer?.cancel();
  }
}
