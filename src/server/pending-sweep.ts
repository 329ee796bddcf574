import { every, systemClock, type TimerHandle } from '../util/clock.js';
import type { OrchestratorOptions } from './orchestrator-options.js';

/** How often waiting jobs are offered to the scaler again when nothing sets it. */
export const DEFAULT_SWEEP_INTERVAL_MS = 10_000;

/** The orchestrator's periodic re-drive, at the configured pending sweep interval. */
export function startPendingSweep(
  opts: Pick<OrchestratorOptions, 'clock' | 'sweepIntervalMs'>,
  sweep: () => void,
): TimerHandle {
  return every(opts.clock ?? systemClock, opts.sweepIntervalMs ?? DEFAULT_SWEEP_INTERVAL_MS, sweep);
}
