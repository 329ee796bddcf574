import { loadScalerConfigForPeople } from '../config/index.js';
import { createScalerBackend } from '../scaler/backends/registry.js';
import type { ScaleEventRouter } from '../scaler/events/router.js';
import type { ScalerManager } from '../scaler/manager.js';
import type { ReloadOutcome } from '../scaler/reload.js';
import type { Store } from '../store/index.js';
import { errorMessage } from '../util/errors.js';
import type { Logger } from '../util/logger.js';
import { swallow } from '../util/swallowed-errors.js';
import type { TypedEvents } from '../util/typed-events.js';
import type { Metrics } from './metrics.js';
import type { OrchestratorEvents } from './orchestrator-events.js';
import type { OrchestratorOptions } from './orchestrator-options.js';
import { backendContext } from './scaler-wiring.js';

/**
 * One scaler config reload: re-read the file, apply it, count the outcome and announce it. An
 * invalid file changes nothing. `afterApplied` runs once a new config is in place.
 */
export async function reloadScalerConfig(d: {
  opts: OrchestratorOptions;
  scaler: ScalerManager | undefined;
  store: Store;
  scaleEvents: ScaleEventRouter | undefined;
  metrics: Metrics;
  events: TypedEvents<OrchestratorEvents>;
  log: Logger;
  afterApplied: () => Promise<void>;
}): Promise<ReloadOutcome | { result: 'not-configured' }> {
  const { opts, scaler, metrics, log } = d;
  const path = opts.scalerConfigPath;
  if (!path || !scaler) return { result: 'not-configured' };
  // Counted once per outcome (success or failed) so that their sum is the number of attempts.
  const res = await loadScalerConfigForPeople(path, opts.scalerConfigDir).catch((err: unknown) => ({
    ok: false as const,
    problems: [errorMessage(err)],
  }));
  const outcome = res.ok
    ? await scaler.reload(res.config, (entry) =>
        createScalerBackend(entry, backendContext(opts, log, d.store, d.scaleEvents, res.config)),
      )
    : ({ result: 'rejected', problems: res.problems } as const);
  if (outcome.result === 'rejected') {
    metrics.configReloads.inc({ result: 'failed' });
    log.error(
      { problems: outcome.problems },
      'scaler configuration reload rejected; keeping the current one',
    );
  } else {
    metrics.configReloads.inc({ result: 'success' });
    await d.afterApplied().catch(swallow(log, 'reload.gateway-listeners'));
  }
  d.events.emit('reload.applied', {
    result: outcome.result,
    problems: 'problems' in outcome ? outcome.problems : undefined,
  });
  return outcome;
}
