import { randomUUID } from 'node:crypto';
import { errorMessage } from '../../../util/errors.js';
import { StoreClaimStore } from '../../claim-store.js';
import type { BackendDescriptor } from '../descriptor.js';
import { EventScalerBackend } from './backend.js';

export { EventScalerBackend, ClaimRefused } from './backend.js';
export type { EventScalerBackendOptions, ScalerEventEmitterLike } from './backend.js';

/** How the registry builds an event scaler: it needs the composition root's scale-event router. */
export const eventDescriptor: BackendDescriptor = {
  type: 'event',
  requiredTools: () => [],
  create(entry, deps) {
    const emitter = deps.scaleEvents;
    if (!emitter)
      throw new Error(`scaler "${entry.name}": event scalers need a scale-event router, and none is wired`);
    emitter.checkTargets?.(entry.name, entry.provisioningTargets ?? []);
    const claimStore = new StoreClaimStore(deps.store, deps.clock, {
      scalerName: entry.name,
      claimTtlSeconds: entry.claimTtlSeconds,
    });
    return Promise.resolve(
      new EventScalerBackend({
        entry,
        emitter,
        claimStore,
        requestId: randomUUID,
        checkTargets: (targets) => {
          try {
            emitter.checkTargets?.(entry.name, targets);
            return undefined;
          } catch (err) {
            return errorMessage(err);
          }
        },
        logger: deps.logger,
        now: () => deps.clock.now(),
      }),
    );
  },
};
