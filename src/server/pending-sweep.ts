import { systemClock, type Clock, type TimerHandle } from '../util/clock.js';
import type { OrchestratorOptions } from './orchestrator-options.js';

/** How often waiting jobs are offered to the scaler again when nothing sets it. */
export const DEFAULT_SWEEP_INTERVAL_MS = 10_000;

/** Run `fn` every `intervalMs` on `clock` until cancelled (the clock's timers, so tests drive it). */
export function everyInterval(clock: Clock, intervalMs: number, fn: () => void): TimerHandle {
  let cancelled = false;
  let handle: TimerHandle;
  const arm = () => {
    handle = clock.setTimer(intervalMs, () => {
      if (cancelled) return;
      // Re-armed first: a throwing pass does not stop the ones after it.
      arm();
      fn();
    });
  };
  arm();
  return {
    cancel: () => {
      cancelled = true;
      handle.cancel();
    },
  };
}

/** The orchestrator's periodic re-drive, at the configured pending sweep interval. */
export function startPendingSweep(
  opts: Pick<OrchestratorOptions, 'clock' | 'sweepIntervalMs'>,
  sweep: () => void,
): TimerHandle {
  return everyInterval(opts.clock ?? systemClock, opts.sweepIntervalMs ?? DEFAULT_SWEEP_INTERVAL_MS, sweep);
}
