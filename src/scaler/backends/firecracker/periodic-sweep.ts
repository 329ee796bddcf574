import type { Clock, TimerHandle } from '../../../util/clock.js';
import { errorMessage } from '../../../util/errors.js';
import type { Logger } from '../../../util/logger.js';

/** Besides the start-up sweep, the VM orphan sweep also runs every 15 minutes. */
export const VM_ORPHAN_SWEEP_INTERVAL_MS = 15 * 60_000;

/**
 * Runs `sweep` every `intervalMs` on the injected clock. The next run is armed only when the last
 * one has finished, so runs never overlap however long one takes. Every orchestrator sweeps its
 * own host (VM directories and TAPs are host-local), so this does not wait for leadership.
 */
export class PeriodicSweep {
  private timer: TimerHandle | undefined;
  private running: Promise<void> | undefined;
  private stopped = false;

  constructor(
    private readonly clock: Clock,
    private readonly intervalMs: number,
    private readonly sweep: () => Promise<unknown>,
    private readonly log: Logger,
  ) {}

  start(): void {
    if (this.stopped || this.timer || this.running) return;
    this.timer = this.clock.setTimer(this.intervalMs, () => this.fire());
  }

  private fire(): void {
    this.timer = undefined;
    this.running = this.sweep()
      .then(
        () => {},
        (err: unknown) => this.log.warn({ err: errorMessage(err) }, 'periodic VM orphan sweep failed'),
      )
      .finally(() => {
        this.running = undefined;
        this.start();
      });
  }

  /** No further runs; resolves once a run in progress has finished. */
  async stop(): Promise<void> {
    this.stopped = true;
    this.timer?.cancel();
    this.timer = undefined;
    await this.running;
  }
}
