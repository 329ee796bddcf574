import { errorMessage } from '../util/errors.js';
import type { Logger } from '../util/logger.js';
import { every, systemClock, type Clock, type TimerHandle } from '../util/clock.js';
import type { LeaderLease } from './leader-lease.js';

/** One piece of leader-only work, run on its own interval while this instance leads. */
export interface LeaderTask {
  name: string;
  intervalMs: number;
  /** `signal` aborts the instant leadership is lost: check it before every action. */
  run(signal: AbortSignal): Promise<void>;
}

/**
 * Runs the leader-only tasks exactly while the lease is held. Losing the lease aborts the
 * current term's signal at once and clears its timers; a new term starts fresh (no state, such
 * as absence clocks, carries over from an earlier term).
 */
export class LeaderWork {
  private term: { controller: AbortController; timers: TimerHandle[] } | undefined;
  private readonly running = new Map<string, Promise<void>>();

  constructor(
    lease: LeaderLease,
    private readonly tasks: LeaderTask[],
    private readonly log: Logger,
    private readonly clock: Clock = systemClock,
  ) {
    lease.onChange((leader) => (leader ? this.begin() : this.end()));
  }

  /** The signal of the current term (aborted when not leading). */
  get signal(): AbortSignal | undefined {
    return this.term?.controller.signal;
  }

  private begin(): void {
    this.end();
    const controller = new AbortController();
    const timers = this.tasks.map((t) =>
      every(
        this.clock,
        () => t.intervalMs,
        () => this.runOnce(t, controller.signal),
      ),
    );
    this.term = { controller, timers };
    for (const t of this.tasks) this.runOnce(t, controller.signal);
  }

  private end(): void {
    if (!this.term) return;
    this.term.controller.abort(new Error('leadership lost'));
    for (const t of this.term.timers) t.cancel();
    this.term = undefined;
  }

  private runOnce(task: LeaderTask, signal: AbortSignal): void {
    if (signal.aborted || this.running.has(task.name)) return;
    const run = task
      .run(signal)
      .catch((err: unknown) => {
        if (!signal.aborted) this.log.warn({ task: task.name, err: errorMessage(err) }, 'leader task failed');
      })
      .finally(() => this.running.delete(task.name));
    this.running.set(task.name, run);
  }

  /** Stop every task and wait for runs in progress to notice. */
  async stop(): Promise<void> {
    this.end();
    await Promise.all(this.running.values());
  }
}
