import type { ScalerConfig, ScalerEntry } from '../config/index.js';
import { agentFitsJob } from './agent-fit.js';
import type { ManagedEntry } from './agent-book.js';
import { isPending } from './agent-lifecycle.js';
import { resolveResources, type EffectiveResources } from './core/resources.js';
import { findLabelSet, noMatchReason, type RoutableLabelSet } from './core/routing.js';
import type { ScalerManagerOptions } from './manager-options.js';
import { routeQuery, type RoutedJob } from './scale-request.js';
import { tokenTtlMs } from './spawn.js';
import { ScalerState } from './state.js';
import type { ScaleJob, ScalerBackend } from './types.js';

/**
 * The read-only side of the ScalerManager: what the dispatcher, status and metrics ask of it, all
 * answered from the in-memory state without changing it. The manager (manager.ts) extends this with
 * everything that acts; keeping the two apart shows at a glance which calls can move an agent.
 */
export class ScalerManagerViews {
  readonly state: ScalerState;

  constructor(readonly opts: ScalerManagerOptions) {
    this.state = new ScalerState(opts.config, opts.backends, opts.backoff);
  }

  get config(): ScalerConfig {
    return this.state.config;
  }
  get backoff() {
    return this.state.backoff;
  }
  get failures() {
    return this.state.failures;
  }
  get instanceId(): string {
    return this.opts.instanceId;
  }
  /** Adoption lookups the store failed (the agent was refused and retries). */
  get adoptionLookupFailures(): number {
    return this.state.tally.adoptionLookupFailures;
  }
  /** Lifecycle moves the table refused: each one is a bug, logged when it happens. */
  get illegalTransitions(): number {
    return this.state.tally.illegalTransitions;
  }

  /** The lifetime its agents' tokens are minted with, and kept ahead by while they are connected. */
  tokenTtlMs(): number {
    return tokenTtlMs(this.opts);
  }

  globalActiveCount(): number {
    return this.state.globalActiveCount();
  }

  /** Is a spawn for this job in flight (reserved, spawning or not yet registered)? */
  isProvisioning(jobId: string): boolean {
    return this.state.jobToAgent.has(jobId);
  }

  /** How many jobs a spawn is in flight for. */
  provisioningCount(): number {
    return this.state.jobToAgent.size;
  }

  /** The jobs a spawn is in flight for: few (bounded by the caps), so a pass may list them. */
  provisioningJobs(): Iterable<string> {
    return this.state.jobToAgent.keys();
  }

  route(job: RoutedJob): RoutableLabelSet | undefined {
    return findLabelSet(routeQuery(job), this.state.table);
  }

  /** Why `route` found nothing for this job, in words (shared by the planner, requestScale and explain). */
  noRouteReason(job: RoutedJob): string {
    return noMatchReason(routeQuery(job), this.state.table);
  }

  resourcesFor(match: RoutableLabelSet, job?: ScaleJob): EffectiveResources {
    const entry = this.state.entries.get(match.scalerName)!;
    return resolveResources(
      job?.resources,
      entry.labelSets[match.index]?.resources,
      this.config.defaults?.resources,
    );
  }

  /** Can this scaler agent take a job of this shape? Only warm agents can be the wrong size. */
  agentFits(agentId: string, job: ScaleJob): boolean {
    return agentFitsJob(this.state.agents.get(agentId), job, this.state.table);
  }

  isManaged(agentId: string): boolean {
    return this.state.agents.has(agentId);
  }

  entries(): ManagedEntry[] {
    return [...this.state.agents.values()];
  }
  /** Configured scalers, then removed ones still draining their agents (and since when). */
  scalerEntries(): { entry: ScalerEntry; retiringSinceMs: number | undefined }[] {
    const s = this.state;
    const retiring = [...s.retiring].flatMap(([name, since]) => {
      const entry = s.entries.get(name);
      return entry ? [{ entry, retiringSinceMs: since }] : [];
    });
    return [...s.config.scalers.map((entry) => ({ entry, retiringSinceMs: undefined })), ...retiring];
  }
  capBook() {
    return this.state.caps;
  }
  /**
   * Does this scaler start its agents before their records are written (the record is written when
   * the backend asks, and an unrecorded start is undone by the launcher itself)? Compute on this
   * host, found again without its record, whose launcher undoes a start, over a store that keeps a
   * new agent's token in memory until its first check.
   */
  launchesProvisionally(scalerName: string): boolean {
    const caps = this.state.backends.get(scalerName)?.capabilities;
    return (
      !!caps?.provisionalLaunch &&
      caps.localCompute &&
      caps.cleansOrphans &&
      this.opts.store.tokens.keepsUnused
    );
  }

  backendList(): ScalerBackend[] {
    return [...this.state.backends.values()];
  }
  routingTable(): readonly RoutableLabelSet[] {
    return this.state.table;
  }
  spawningCount(): number {
    let n = 0;
    for (const m of this.state.agents.values()) if (isPending(m.phase)) n++;
    return n;
  }
}
