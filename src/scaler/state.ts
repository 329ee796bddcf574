import { ScalerTally } from './tally.js';
import type { ScalerConfig, ScalerEntry } from '../config/index.js';
import type { ManagedEntry } from './agent-book.js';
import { DEFAULT_PROVISION_BACKOFF, ProvisionBackoff, type ProvisionBackoffOptions } from './core/backoff.js';
import { CapBook, type CapLimits } from './core/caps.js';
import { FailureTracker } from './core/failure-tracker.js';
import { buildRoutingTable, type RoutableLabelSet } from './core/routing.js';
import { Semaphore } from './core/semaphore.js';
import type { ScalerBackend } from './types.js';

/**
 * Everything the manager knows, in memory: the hot path never queries the store. The manager, the
 * warm pools, reload and recovery all read and change this one object.
 */
export class ScalerState {
  config: ScalerConfig;
  /** Entries of configured scalers, plus retiring ones that still hold agents. */
  readonly entries = new Map<string, ScalerEntry>();
  readonly backends = new Map<string, ScalerBackend>();
  /** Removed from the config but still draining their agents. */
  readonly retiring = new Map<string, number>();
  readonly agents = new Map<string, ManagedEntry>();
  /** Job id → the agent being provisioned for it (until it registers or fails). */
  readonly jobToAgent = new Map<string, string>();
  readonly semaphores = new Map<string, Semaphore>();
  readonly caps: CapBook;
  readonly backoff: ProvisionBackoff;
  readonly tally = new ScalerTally();
  readonly failures = new FailureTracker();
  table: RoutableLabelSet[];

  constructor(config: ScalerConfig, backends: ScalerBackend[], backoff?: ProvisionBackoffOptions) {
    this.config = config;
    for (const e of config.scalers) this.entries.set(e.name, e);
    for (const b of backends) this.backends.set(b.name, b);
    this.backoff = new ProvisionBackoff({ ...DEFAULT_PROVISION_BACKOFF, ...backoff });
    this.caps = new CapBook(this.capLimits());
    this.table = buildRoutingTable(config);
  }

  capLimits(): CapLimits {
    const scalers = new Map<string, { maxAgents: number; resourceCap?: ScalerEntry['resourceCap'] }>();
    for (const e of this.entries.values())
      scalers.set(e.name, { maxAgents: e.maxAgents, resourceCap: e.resourceCap });
    return {
      globalMaxAgents: this.config.globalMaxAgents,
      globalResourceCap: this.config.globalResourceCap,
      scalers,
    };
  }

  /** Re-derive what depends on the config: caps, routing, spawn widths. */
  refresh(): void {
    this.caps.setLimits(this.capLimits());
    this.table = buildRoutingTable(this.config);
    for (const [name, sem] of this.semaphores) {
      const entry = this.entries.get(name);
      // A changed width gets a new semaphore on the next spawn; spawns already queued keep the old one.
      if (!entry || sem.width !== Math.max(1, Math.floor(entry.maxConcurrentSpawns)))
        this.semaphores.delete(name);
    }
  }

  semaphoreFor(entry: ScalerEntry): Semaphore {
    let sem = this.semaphores.get(entry.name);
    if (!sem) {
      sem = new Semaphore(entry.maxConcurrentSpawns);
      this.semaphores.set(entry.name, sem);
    }
    return sem;
  }

  globalActiveCount(): number {
    let n = 0;
    for (const b of this.backends.values()) n += b.getActiveCount();
    return n;
  }

  agentsOf(scalerName: string): ManagedEntry[] {
    return [...this.agents.values()].filter((a) => a.scalerName === scalerName);
  }
}
