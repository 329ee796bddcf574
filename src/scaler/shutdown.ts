import type { Logger } from '../util/logger.js';
import type { ManagedEntry } from './agent-book.js';
import type { MachineLedger } from './ledger/machine-ledger.js';
import type { TeardownReason } from './lifecycle-port.js';
import type { DestroyReason, ScalerBackend } from './types.js';

/** What stopping the agents needs of the manager: read-only views, and teardown as the way out. */
export interface ShutdownHost {
  readonly opts: { readonly ledger?: MachineLedger | undefined };
  readonly state: {
    readonly agents: ReadonlyMap<string, ManagedEntry>;
    readonly backends: ReadonlyMap<string, ScalerBackend>;
  };
  readonly log: Logger;
  readonly instanceId: string;
  teardown(m: ManagedEntry, reason: TeardownReason): Promise<void>;
  /** Teardowns that began before the stop (an agent that left on its own, a reap). */
  inFlightTeardowns(): Promise<void>[];
  noteSwallowed(site: string, err: unknown, context?: Record<string, unknown>): void;
}

/**
 * Stop the agents and backends a manager started, once it has stopped spawning. Never hangs longer
 * than the grace. Agents in `keep` (they hold a running job) are left alive with their spawn records
 * and tokens, so the next start adopts them exactly as after a crash. `drain` marks the end of a
 * graceful stop, `shutdown` a plain one.
 */
export async function stopAgents(
  host: ShutdownHost,
  graceMs: number,
  keep: ReadonlySet<string> | undefined,
  reason: Extract<DestroyReason, 'shutdown' | 'drain'>,
): Promise<void> {
  // Agents of a cluster-lifetime backend belong to the cluster: this orchestrator stopping leaves them be.
  const clusterOwned = (m: ManagedEntry) =>
    host.state.backends.get(m.scalerName)?.capabilities.lifetime === 'cluster';
  const going = [...host.state.agents.values()].filter((m) => !keep?.has(m.agentId) && !clusterOwned(m));
  for (const m of going) m.abort.abort(new Error('shutting down'));
  // A teardown already under way is gone from the books but not yet from the host or the store: the
  // stop waits for it too, so that its spawn record and token are deleted before the store closes
  // rather than found again by the next start.
  const all = [...host.inFlightTeardowns(), ...going.map((m) => host.teardown(m, reason))];
  // A backend's own shutdown stops every agent it tracks, so it only runs when none is kept.
  const backends = keep ? [] : [...host.state.backends.values()].map((b) => b.shutdownAll());
  let timer: NodeJS.Timeout | undefined;
  const grace = new Promise<'timeout'>((r) => (timer = setTimeout(() => r('timeout'), graceMs)));
  const outcome = await Promise.race([Promise.allSettled([...all, ...backends]), grace]);
  clearTimeout(timer);
  if (outcome === 'timeout')
    host.log.error('Scaler backends still stopping their agents after the shutdown grace');
  for (const b of host.state.backends.values()) b.release?.();
  // Kept agents keep their machine-pool reservations; torn-down ones released theirs above.
  if (!keep)
    await host.opts.ledger
      ?.releaseAllForInstance()
      .catch((e: unknown) =>
        host.noteSwallowed('scaler.ledger-release-all', e, { instanceId: host.instanceId }),
      );
  await host.opts.ledger?.stop();
}
