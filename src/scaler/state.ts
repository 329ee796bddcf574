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
 * warm pools, reload and recovery all read this one object; they change its maps only through the
 * methods below, so each kind of change (an agent tracked, a job's provisioning link dropped, a
 * scaler retired) happens in one place.
 */
export class ScalerState {
  #config: ScalerConfig;
  readonly #entries = new Map<string, ScalerEntry>();
  readonly #backends = new Map<string, ScalerBackend>();
  readonly #retiring = new Map<string, number>();
  readonly #agents = new Map<string, ManagedEntry>();
  readonly #jobToAgent = new Map<string, string>();
  readonly #semaphores = new Map<string, Semaphore>();
  readonly caps: CapBook;
  readonly backoff: ProvisionBackoff;
  readonly tally = new ScalerTally();
  readonly failures = new FailureTracker();
  #table: RoutableLabelSet[];

  constructor(config: ScalerConfig, backends: ScalerBackend[], backoff?: ProvisionBackoffOptions) {
    this.#config = config;
    for (const e of config.scalers) this.#entries.set(e.name, e);
    for (const b of backends) this.#backends.set(b.name, b);
    this.backoff = new ProvisionBackoff({ ...DEFAULT_PROVISION_BACKOFF, ...backoff });
    this.caps = new CapBook(this.capLimits());
    this.#table = buildRoutingTable(config);
  }

  /** The config in force (the last reload's). */
  get config(): ScalerConfig {
    return this.#config;
  }
  /** Where each label set routes, derived from the config. */
  get table(): readonly RoutableLabelSet[] {
    return this.#table;
  }

  /** Entries of configured scalers, plus retiring ones that still hold agents. */
  get entries(): ReadonlyMap<string, ScalerEntry> {
    return this.#entries;
  }
  get backends(): ReadonlyMap<string, ScalerBackend> {
    return this.#backends;
  }
  /** Removed from the config but still draining their agents: name → when it was removed. */
  get retiring(): ReadonlyMap<string, number> {
    return this.#retiring;
  }
  get agents(): ReadonlyMap<string, ManagedEntry> {
    return this.#agents;
  }
  /** Job id → the agent being provisioned for it (until it registers or fails). */
  get jobToAgent(): ReadonlyMap<string, string> {
    return this.#jobToAgent;
  }

  /** Start tracking an agent (spawned, recovered or adopted) under its id. */
  track(m: ManagedEntry): void {
    this.#agents.set(m.agentId, m);
  }

  /** Stop tracking `m` — unless its id has meanwhile been taken by another entry, which stays. */
  untrack(m: ManagedEntry): void {
    if (this.#agents.get(m.agentId) === m) this.#agents.delete(m.agentId);
  }

  /** The job now has an agent on the way: scale requests for it are not answered twice. */
  bindJob(jobId: string, agentId: string): void {
    this.#jobToAgent.set(jobId, agentId);
  }

  /**
   * The agent's provisioning for the job is over (registered, failed, gone). Only that agent's
   * link goes: the job may already be waiting on a newer agent, whose link must stay.
   */
  releaseJob(jobId: string, agentId: string): void {
    if (this.#jobToAgent.get(jobId) === agentId) this.#jobToAgent.delete(jobId);
  }

  /** A reload built a backend for an added scaler. */
  addBackend(b: ScalerBackend): void {
    this.#backends.set(b.name, b);
  }

  /** A reload removed the scaler; it keeps its backend until its last agent is gone. */
  retire(name: string, sinceMs: number): void {
    this.#retiring.set(name, sinceMs);
  }

  /** A reload brought back a scaler that was still retiring. */
  resurrect(name: string): void {
    this.#retiring.delete(name);
  }

  /** Take the reloaded config: its entries replace same-named ones, then what derives is rebuilt. */
  applyConfig(next: ScalerConfig): void {
    this.#config = next;
    for (const e of next.scalers) this.#entries.set(e.name, e);
    this.refresh();
  }

  /** A retired scaler's last agent is gone: forget it entirely, and its caps with it. */
  dropScaler(name: string): void {
    this.#retiring.delete(name);
    this.#backends.delete(name);
    this.#entries.delete(name);
    this.#semaphores.delete(name);
    this.caps.setLimits(this.capLimits());
  }

  capLimits(): CapLimits {
    const scalers = new Map<string, { maxAgents: number; resourceCap?: ScalerEntry['resourceCap'] }>();
    for (const e of this.#entries.values())
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
    this.#table = buildRoutingTable(this.config);
    for (const [name, sem] of this.#semaphores) {
      const entry = this.#entries.get(name);
      // A changed width gets a new semaphore on the next spawn; spawns already queued keep the old one.
      if (!entry || sem.width !== Math.max(1, Math.floor(entry.maxConcurrentSpawns)))
        this.#semaphores.delete(name);
    }
  }

  semaphoreFor(entry: ScalerEntry): Semaphore {
    let sem = this.#semaphores.get(entry.name);
    if (!sem) {
      sem = new Semaphore(entry.maxConcurrentSpawns);
      this.#semaphores.set(entry.name, sem);
    }
    return sem;
  }

  globalActiveCount(): number {
    let n = 0;
    for (const b of this.#backends.values()) n += b.getActiveCount();
    return n;
  }

  agentsOf(scalerName: string): ManagedEntry[] {
    return [...this.#agents.values()].filter((a) => a.scalerName === scalerName);
  }
}
