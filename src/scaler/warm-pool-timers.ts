import type { Clock, TimerHandle } from '../util/clock.js';

export const WARM_TICK_MS = 30_000;

/**
 * When the warm pools run a pass: every WARM_TICK_MS, at once when asked (`replenishSoon`), and at
 * the next schedule moment, so a scheduled size applies on time, not a tick late. Passes are
 * single-flight: a pass counts its deficit once and then awaits each spawn, so two at once would
 * each fill the same gap.
 */
export class WarmPoolTimers {
  private timer: TimerHandle | undefined;
  private soon: TimerHandle | undefined;
  private running = false;
  /** The pass in progress (with its re-runs), and whether another was asked for meanwhile. */
  private inFlight: Promise<void> | undefined;
  private again = false;
  /** Fires at the next schedule moment. */
  private boundary: TimerHandle | undefined;

  constructor(
    private readonly clock: Clock,
    /** The earliest next schedule change over all pools (epoch ms), Infinity when none. */
    private readonly nextChangeAtMs: () => number,
    private readonly pass: () => Promise<void>,
  ) {}

  /** (Re)arm the timer for the next schedule moment; nothing while stopped. */
  armBoundary(): void {
    this.boundary?.cancel();
    this.boundary = undefined;
    if (!this.running) return;
    const now = this.clock.now();
    const at = this.nextChangeAtMs();
    if (at === Infinity) return;
    this.boundary = this.clock.setTimer(at - now, () => {
      this.boundary = undefined;
      void this.tick();
    });
  }

  /** Arm the schedule timer if none is armed (a pass after a schedule moment fired). */
  armBoundaryIfNone(): void {
    if (!this.boundary) this.armBoundary();
  }

  start(): void {
    this.running = true;
    this.armBoundary();
    void this.tick();
    const loop = () => {
      this.timer = this.clock.setTimer(WARM_TICK_MS, () => {
        void this.tick();
        if (this.running) loop();
      });
    };
    loop();
  }

  stop(): void {
    this.running = false;
    this.timer?.cancel();
    this.soon?.cancel();
    this.boundary?.cancel();
  }

  replenishSoon(): void {
    if (!this.running || this.soon) return;
    this.soon = this.clock.setTimer(0, () => {
      this.soon = undefined;
      void this.tick();
    });
  }

  /**
   * Run a pass, single-flight. A call made while a pass runs asks for one more pass after it
   * (however many calls came), and resolves when that one is done.
   */
  tick(): Promise<void> {
    if (this.inFlight) {
      this.again = true;
      return this.inFlight;
    }
    const run = async () => {
      try {
        do {
          this.again = false;
          await this.pass();
        } while (this.again);
      } finally {
        this.inFlight = undefined;
      }
    };
    this.inFlight = run();
    return this.inFlight;
  }
}
