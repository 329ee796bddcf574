import type { Dispatcher } from '../dispatch/dispatcher.js';
import type { ScalerManager } from '../scaler/manager.js';
import { errorMessage } from '../util/errors.js';
import type { Logger } from '../util/logger.js';

/**
 * At start-up, after recovery: each backend that can removes compute it started earlier that no live
 * agent owns. An agent counts as alive when it is connected or the manager still expects it (it was
 * re-adopted and may reconnect); the backends themselves only ever look at their own scaler's compute.
 */
export async function sweepOrphans(
  scaler: ScalerManager,
  dispatcher: Dispatcher,
  log: Logger,
): Promise<number> {
  const alive = (id: string) => dispatcher.registry.get(id) !== undefined || scaler.state.agents.has(id);
  let total = 0;
  for (const b of scaler.backendList()) {
    if (!b.cleanupOrphans) continue;
    try {
      const n = await b.cleanupOrphans(alive);
      if (n) log.info({ scaler: b.name, removed: n }, 'removed orphaned agent compute');
      total += n;
    } catch (err) {
      log.warn({ scaler: b.name, err: errorMessage(err) }, 'orphan sweep failed; leftover compute stays');
    }
  }
  return total;
}
