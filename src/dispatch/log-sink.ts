import type { LogLine } from '../store/logs-repo.js';
import type { Store } from '../store/index.js';
import type { Logger } from '../util/logger.js';
import { errorMessage } from '../util/errors.js';

/**
 * Job output is written in batches: one insert per burst instead of one per line, so a chatty
 * build does not turn into thousands of tiny transactions.
 */
export class LogSink {
  private buffer: LogLine[] = [];
  private timer: NodeJS.Timeout | undefined;
  private flushing: Promise<void> = Promise.resolve();

  constructor(
    private readonly store: Store,
    private readonly log: Logger,
    private readonly intervalMs = 100,
  ) {}

  push(lines: LogLine[]): void {
    this.buffer.push(...lines);
    if (this.buffer.length >= 2000) void this.flush();
    else if (!this.timer) {
      this.timer = setTimeout(() => void this.flush(), this.intervalMs);
      this.timer.unref();
    }
  }

  /** Write everything buffered so far; resolves once it is in the store. */
  flush(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    const batch = this.buffer;
    this.buffer = [];
    this.flushing = this.flushing.then(async () => {
      if (!batch.length) return;
      try {
        await this.store.logs.append(batch);
      } catch (err) {
        this.log.error({ err: errorMessage(err), lines: batch.length }, 'could not store job log lines');
      }
    });
    return this.flushing;
  }
}
