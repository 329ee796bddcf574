import { errorMessage } from '../util/errors.js';
import type { Logger } from '../util/logger.js';

/** Where a carried-on error is reported for a metric, when anyone listens. */
type SwallowedErrorHook = { onSwallowedError?(site: string, err: unknown): void } | undefined;

/**
 * Errors the scaler carries on from (cleanup whose failure harms nothing now, or that a later sweep
 * redoes): each is logged with its context, counted per site, and passed to the hook for a metric.
 * The hook is read at each error, since it is set after the scaler is built and cleared at a stop.
 */
export class SwallowedErrors {
  private readonly bySite = new Map<string, number>();

  constructor(
    private readonly log: Logger,
    private readonly hook: () => SwallowedErrorHook,
  ) {}

  note(site: string, err: unknown, context: Record<string, unknown> = {}): void {
    this.bySite.set(site, (this.bySite.get(site) ?? 0) + 1);
    this.log.warn({ ...context, site, err: errorMessage(err) }, `scaler carried on after an error (${site})`);
    try {
      this.hook()?.onSwallowedError?.(site, err);
    } catch (hookErr) {
      this.log.error({ site, err: errorMessage(hookErr) }, 'swallowed-error hook failed');
    }
  }

  /** How many errors were carried on from, per site, since start. */
  counts(): Record<string, number> {
    return Object.fromEntries(this.bySite);
  }
}
