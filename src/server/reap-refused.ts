import type { ScalerManager } from '../scaler/manager.js';
import type { Logger } from '../util/logger.js';
import { errorMessage } from '../util/errors.js';
import { countSwallowed } from '../util/swallowed-errors.js';

const SCALER_LABEL = 'kici:scaler:';

/**
 * A `scaler-` agent we hold no record of was refused; its compute (left from a crash, or started by
 * hand) would otherwise keep running. The backend named by its `kici:scaler:` label is asked first,
 * else every host-local backend; each only uses host-local evidence that the compute is this agent's.
 */
export async function reapRefusedAgent(
  scaler: ScalerManager,
  agentId: string,
  labels: readonly string[],
  log: Logger,
): Promise<boolean> {
  const named = labels.find((l) => l.startsWith(SCALER_LABEL))?.slice(SCALER_LABEL.length);
  const backends = scaler.backendList().filter((b) => b.reapUnowned && b.capabilities.localCompute);
  const owner = backends.find((b) => b.name === named);
  for (const b of owner ? [owner] : backends) {
    try {
      if (await b.reapUnowned!(agentId, null)) {
        log.info({ agentId, scaler: b.name }, 'reclaimed the compute of a refused scaler agent');
        return true;
      }
    } catch (err) {
      countSwallowed('session.reap-refused');
      log.warn({ agentId, scaler: b.name, err: errorMessage(err) }, 'could not reclaim a refused agent');
    }
  }
  return false;
}
