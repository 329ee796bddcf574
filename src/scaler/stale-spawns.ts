import { monoNow, type Clock } from '../util/clock.js';
import type { ManagedEntry } from './agent-book.js';
import type { ClassifiedSpawnError } from './core/spawn-errors.js';
import { DEFAULT_SPAWN_TIMEOUT_MS } from './spawn.js';
import type { ScalerBackend } from './types.js';

/** What the spawn-deadline backstop reads of the manager, and how it fails a spawn. */
export interface StaleSpawnHost {
  readonly opts: { readonly clock: Clock; readonly spawnTimeoutMs?: number | undefined };
  readonly state: {
    readonly agents: ReadonlyMap<string, ManagedEntry>;
    readonly backends: ReadonlyMap<string, ScalerBackend>;
  };
  failSpawn(m: ManagedEntry, error: ClassifiedSpawnError): Promise<void>;
}

/** Backstop for agents that were started but never registered (wrong URL, hung start-up). */
export function failStaleSpawns(host: StaleSpawnHost): void {
  const limit = host.opts.spawnTimeoutMs ?? DEFAULT_SPAWN_TIMEOUT_MS;
  const now = host.opts.clock.now();
  const mono = monoNow(host.opts.clock);
  // Elapsed time on the monotonic clock when known, so a wall-clock step fails no spawn.
  const age = (m: ManagedEntry) =>
    m.spawnStartedMono !== undefined
      ? mono - m.spawnStartedMono
      : now - (m.spawnStartedAtMs ?? m.createdAtMs);
  for (const m of host.state.agents.values()) {
    // Cluster-lifetime provisions are reaped by the one instance holding the reaper lease.
    if (host.state.backends.get(m.scalerName)?.capabilities.lifetime === 'cluster') continue;
    if (m.phase === 'starting' && age(m) > limit) {
      void host.failSpawn(m, {
        kind: 'spawn-timeout',
        message: `agent ${m.agentId} started but did not register within ${Math.round(limit / 1000)}s`,
        deterministic: false,
      });
    }
  }
}
