import { errorMessage } from './errors.js';
import type { Logger } from './logger.js';

/**
 * Errors we deliberately do not propagate (best-effort writes, cleanup) are still logged with their
 * context and counted per call site, so a failing store or disk shows up in /metrics instead of
 * vanishing. The counts are process-wide: the Metrics registry reads them on each scrape.
 */
const counts = new Map<string, number>();

export function countSwallowed(site: string): void {
  counts.set(site, (counts.get(site) ?? 0) + 1);
}

export function swallowedCounts(): ReadonlyMap<string, number> {
  return counts;
}

/** A `.catch` handler: log at warn with `site` and `context`, count it, and resolve to undefined. */
export function swallow(log: Logger, site: string, context: Record<string, unknown> = {}) {
  return (err: unknown): undefined => {
    countSwallowed(site);
    log.warn({ ...context, site, err: errorMessage(err) }, `ignored an error: ${site}`);
    return undefined;
  };
}
