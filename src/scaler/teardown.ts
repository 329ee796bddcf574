import { errorMessage } from '../util/errors.js';
import type { Logger } from '../util/logger.js';
import type { ManagedEntry } from './agent-book.js';
import type { LifecycleDeps, TeardownReason } from './lifecycle-port.js';
import type { ScalerBackend } from './types.js';

/**
 * The one way an agent leaves: its compute destroyed, its spawn record and token gone, its capacity
 * given back. The in-memory part is the host's `forget`, so the maps stay the manager's to change.
 */
export interface TeardownHost {
  readonly opts: Pick<LifecycleDeps, 'store' | 'clock'>;
  readonly state: { readonly backends: ReadonlyMap<string, ScalerBackend> };
  readonly log: Logger;
  /** Forget the agent in memory and release its reservation (synchronously). */
  forget(m: ManagedEntry): void;
  /** Let a removed scaler's backend go once its last agent has. */
  sweepRetired(): void;
  notifyCapacityFreed(): void;
  noteSwallowed(site: string, err: unknown, context?: Record<string, unknown>): void;
}

/** Destroy compute (idempotent), drop every record of the agent, release its reservation. */
export async function teardownAgent(
  host: TeardownHost,
  m: ManagedEntry,
  reason: TeardownReason,
): Promise<void> {
  // A second teardown of the same agent (a racing disconnect, reap or sweep) has nothing to do.
  if (m.phase === 'destroying') return;
  host.forget(m);
  const backend = host.state.backends.get(m.scalerName);
  try {
    await backend?.destroy(m.agentId, { reason });
  } catch (err) {
    host.log.warn({ err: errorMessage(err), agentId: m.agentId }, 'destroy failed');
  }
  // The token goes before the record: a crash between the two leaves a record, which the next
  // start's recovery finds and finishes, not a live token with nothing behind it.
  await host.opts.store.tokens
    .revokeForAgent(m.agentId, new Date(host.opts.clock.now()))
    .catch((e: unknown) => host.noteSwallowed('scaler.token-revoke', e, { agentId: m.agentId }));
  // Compute and records are gone: the latest moment a trace takes as the end of the release.
  const goneAt = new Date(host.opts.clock.now());
  await host.opts.store.spawns.deleteAgent(m.agentId, goneAt).catch((err: unknown) => {
    host.log.warn({ err: errorMessage(err), agentId: m.agentId }, 'could not delete spawn record');
  });
  host.sweepRetired();
  host.notifyCapacityFreed();
}
