import { errorMessage } from '../util/errors.js';
import type { Logger } from '../util/logger.js';

export interface PumpDeps {
  /** One reconcile pass over the queue. */
  pass: () => Promise<void>;
  /** No new work is handed out (stopping, draining, or the data dir nearly full): no pass starts. */
  held: () => boolean;
  /** Stopping or draining: a pass asked for again meanwhile is not run. */
  ending: () => boolean;
  log: Logger;
}

/**
 * Runs the dispatcher's reconcile passes one at a time. Coalescing: a request during a pass makes
 * the pass run once more, never twice at once, so a burst of results or submits costs one more pass.
 */
export class Pump {
  private pumping = false;
  private dirty = false;
  private running: Promise<void> = Promise.resolve();

  constructor(private readonly deps: PumpDeps) {}

  /** A pass is asked for or under way. */
  get busy(): boolean {
    return this.pumping;
  }

  /** Settles once the pass in progress (and the ones asked for during it) has ended. */
  get idle(): Promise<void> {
    return this.running;
  }

  request(): Promise<void> {
    if (this.deps.held()) return this.running;
    if (this.pumping) {
      this.dirty = true;
      return this.running;
    }
    this.pumping = true;
    this.running = (async () => {
      try {
        // One turn of the event loop first: results stored together free their agents together,
        // and one pass then fills them all with one claim statement instead of a pass each.
        await new Promise<void>((r) => setImmediate(r));
        do {
          this.dirty = false;
          await this.deps.pass();
        } while (this.dirty && !this.deps.ending());
      } catch (err) {
        this.deps.log.error({ err: errorMessage(err) }, 'dispatch pass failed');
      } finally {
        this.pumping = false;
      }
    })();
    return this.running;
  }

  /** The pass under way left work behind (a lost claim freed its agent): run it once more. */
  again(): void {
    this.dirty = true;
  }
}
