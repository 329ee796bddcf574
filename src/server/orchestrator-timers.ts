import type { Dispatcher } from '../dispatch/dispatcher.js';
import type { ScalerManager } from '../scaler/manager.js';
import { every, systemClock } from '../util/clock.js';
import { errorMessage } from '../util/errors.js';
import type { Logger } from '../util/logger.js';
import type { EventsView } from '../util/typed-events.js';
import { SilenceWatch } from './heartbeat-check.js';
import type { OrchestratorEvents } from './orchestrator-events.js';
import { agentHeartbeatMs, type OrchestratorOptions } from './orchestrator-options.js';
import { startPendingSweep } from './pending-sweep.js';
import { heldAgents, startTokenRenewal } from './token-renewal.js';
import type { TokensRepo } from '../store/tokens-repo.js';
import { tokenTtlMs } from '../scaler/spawn.js';

/**
 * The orchestrator's own timers: the pending sweep, the check for silent agents and the renewal of
 * held single-use agents' tokens, plus the prompt withdrawal of a provision whose job ended
 * while it was starting. `cancel` ends the timers.
 */
export function startOrchestratorTimers(d: {
  opts: OrchestratorOptions;
  scaler: ScalerManager | undefined;
  dispatcher: Dispatcher;
  events: EventsView<OrchestratorEvents>;
  tokens: Pick<TokensRepo, 'prolong'>;
  log: Logger;
}): { cancel(): void } {
  const { opts, scaler, dispatcher, log } = d;
  // Periodic re-drive: the backstop that keeps a job from waiting past one interval while capacity exists.
  const clock = opts.clock ?? systemClock;
  const sweepTimer = startPendingSweep(opts, () => {
    scaler?.sweepStale();
    void scaler?.withdrawEnded();
    scaler?.state.tally.redispatched('sweep');
    void dispatcher.requestPump();
  });
  // A job that ends while its provision is still starting frees that provision at once; the
  // sweep above is only the backstop for ends this instance does not hear (a peer's cancel).
  d.events.on('job.settled', ({ jobId }) => {
    const starting = scaler?.entries().some((m) => m.boundJobId === jobId && m.phase === 'starting');
    if (starting)
      scaler
        ?.withdrawEnded()
        .catch((err: unknown) => log.warn({ err: errorMessage(err) }, 'could not withdraw a provision'));
  });
  const hb = agentHeartbeatMs(opts);
  const silence = new SilenceWatch(clock, hb);
  const heartbeatTimer = every(clock, hb, () => silence.check(dispatcher.registry.list()));
  const renewal = startTokenRenewal({
    clock,
    tokens: d.tokens,
    agentIds: () => heldAgents(dispatcher.registry.list(), scaler?.entries() ?? []),
    ttlMs: () => scaler?.tokenTtlMs() ?? tokenTtlMs(opts),
    log,
  });
  return {
    cancel: () => {
      sweepTimer.cancel();
      heartbeatTimer.cancel();
      renewal.cancel();
    },
  };
}
