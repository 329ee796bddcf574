import type { Dispatcher } from '../dispatch/dispatcher.js';
import type { ScalerManager } from '../scaler/manager.js';
import type { RecoveryCounts } from '../scaler/recovery.js';
import type { Store } from '../store/index.js';
import type { Clock } from '../util/clock.js';
import type { Logger } from '../util/logger.js';
import { sweepOrphans } from './orphan-sweep.js';
import { heldAgents, renewHeldTokens } from './token-renewal.js';

/**
 * What a start takes over from the run before it, in this order and before it listens: the jobs
 * the store says are active, the scaler's agents (re-adopted), compute that no live agent owns
 * (swept), and the tokens of the agents this instance now holds (renewed, so none that comes back
 * is refused as expired). Returns the counts the ready line reports.
 */
export async function takeOverPreviousRun(d: {
  dispatcher: Dispatcher;
  scaler: ScalerManager | undefined;
  store: Pick<Store, 'tokens'>;
  clock: Clock;
  log: Logger;
}): Promise<{ recovered: Awaited<ReturnType<Dispatcher['recover']>>; adopted: RecoveryCounts | undefined }> {
  const { dispatcher, scaler, clock, log } = d;
  const recovered = await dispatcher.recover();
  const adopted = scaler ? await scaler.recover() : undefined;
  if (scaler) await sweepOrphans(scaler, dispatcher, log);
  if (scaler)
    await renewHeldTokens({
      clock,
      tokens: d.store.tokens,
      agentIds: heldAgents(dispatcher.registry.list(), scaler.entries()),
      ttlMs: scaler.tokenTtlMs(),
      log,
    });
  return { recovered, adopted };
}
