import type { LabelSetConfig, ScalerEntry } from '../../../config/index.js';
import { silentLogger, type Logger } from '../../../util/logger.js';
import { contextFromPositional, isPositional, type PositionalSpawnArgs } from '../positional-spawn.js';
import type { ClaimedCredentials } from '../../claim-store.js';
import { checkLabelSets } from '../../core/label-set-check.js';
import type {
  BackendCapabilities,
  DeliveryProblem,
  InventoryItem,
  ManagedAgent,
  RequiredTool,
  ScalerBackend,
  SpawnContext,
  ValidationResult,
} from '../../types.js';
import {
  Provision,
  scaleDownReason,
  type EventDestroyContext,
  type EventScalerBackendOptions,
} from './options.js';
import { spawnProvision, teardownProvision, type ProvisioningHost } from './provisioning.js';

/** A claim code that redeems nothing: unknown, already used, or expired. */
export class ClaimRefused extends Error {
  override readonly name = 'ClaimRefused';
}

export type { ScalerEventEmitterLike } from '../../events/payloads.js';
export type { EventClaimStore, EventDestroyContext, EventScalerBackendOptions } from './options.js';

/**
 * No local compute: spawn emits `kici.scaler.scale-up`, destroy emits `kici.scaler.scale-down`, and
 * a provisioning target (a job of ours, or a webhook) boots or stops a cloud instance. The instance's
 * agent redeems its claim code and registers with the id chosen here; bound-job dispatch does the rest.
 */
export class EventScalerBackend implements ScalerBackend {
  readonly type = 'event' as const;
  readonly capabilities: BackendCapabilities = {
    localCompute: false,
    lifetime: 'cluster',
    cleansOrphans: false,
    capturesLogs: false,
    peerAdoptable: true,
  };
  readonly name: string;
  readonly spawnsOnLocalHost = false;
  readonly logsSource = 'event';
  private entry: ScalerEntry;
  private readonly agents = new Map<string, Provision>();
  private readonly log: Logger;
  private readonly now: () => number;
  /** What spawn and teardown (provisioning.ts) work with. */
  private readonly host: ProvisioningHost;
  private givenUp: DeliveryProblem | undefined;

  constructor(private readonly opts: EventScalerBackendOptions) {
    this.entry = opts.entry;
    this.name = opts.entry.name;
    this.log = (opts.logger ?? silentLogger()).child({ component: 'event-backend', scaler: this.name });
    this.now = opts.now ?? Date.now;
    this.host = {
      name: this.name,
      opts,
      log: this.log,
      now: this.now,
      provisions: {
        count: () => this.agents.size,
        track: (agentId, p) => void this.agents.set(agentId, p),
        releaseIfStill: (agentId, p) => this.untrack(agentId, p),
      },
    };
  }

  /** The entry this backend serves; a reload replaces it whole. */
  get currentEntry(): ScalerEntry {
    return this.entry;
  }

  /** The manager reads these off the backend; they follow the entry a reload installs. */
  get maxAgents(): number {
    return this.entry.maxAgents;
  }
  get labelSets(): LabelSetConfig[] {
    return this.entry.labelSets;
  }

  getActiveCount(): number {
    return this.agents.size;
  }

  /** Nothing runs here, so nothing is needed on this host. */
  getRequiredTools(): RequiredTool[] {
    return [];
  }

  /** The port form (one context) or the public positional one; both track and emit the same way. */
  spawn(ctx: SpawnContext): Promise<ManagedAgent>;
  spawn(...args: PositionalSpawnArgs): Promise<ManagedAgent>;
  async spawn(...args: [SpawnContext] | PositionalSpawnArgs): Promise<ManagedAgent> {
    const ctx = isPositional(args)
      ? await contextFromPositional(this.entry, args, { claimAuth: true, now: this.now })
      : args[0];
    return spawnProvision(this.host, this.entry, ctx);
  }

  private untrack(agentId: string, p: Provision): void {
    if (this.agents.get(agentId) === p) this.agents.delete(agentId);
  }

  /**
   * Drop the provision, emit its scale-down, then invalidate its claim. The entry goes before the
   * first await, so a repeated or concurrent destroy finds nothing and emits nothing. The claim is
   * invalidated last and its failure only logged: the scale-down is the only thing that stops the
   * customer's instance, and a leftover claim is single-use and expires anyway. A provision whose
   * spawn is still running is only cancelled: the spawn tears it down once its scale-up is out.
   */
  async destroy(agentId: string, ctx: EventDestroyContext = {}): Promise<void> {
    const p = this.agents.get(agentId);
    if (!p) return;
    this.agents.delete(agentId);
    if (p.cancel(ctx.reason ?? 'shutdown')) return;
    const targets = ctx.targets?.length ? ctx.targets : p.targets?.length ? p.targets : this.liveTargets();
    await teardownProvision(this.host, agentId, scaleDownReason(ctx.reason), targets);
  }

  private liveTargets(): string[] {
    return [...(this.entry.provisioningTargets ?? [])];
  }

  /** Stop tracking without emitting: a peer adopted the provision, or its record went away. */
  forget(agentId: string): void {
    this.agents.delete(agentId);
  }

  /**
   * Track a provision spawned elsewhere (a peer, a previous run) so a later destroy emits its
   * scale-down. Recovery passes the spawn record's backend ref: a provision's ref is its agent id,
   * so a missing or different ref is no evidence of a provision and is refused.
   */
  adopt(
    agentId: string,
    labelSet: string[],
    backendRef?: string | null,
    targets?: string[],
  ): Promise<boolean> {
    if (backendRef !== undefined && backendRef !== agentId) return Promise.resolve(false);
    if (!this.agents.has(agentId))
      this.agents.set(agentId, new Provision(labelSet, this.now(), targets, 'adopted'));
    return Promise.resolve(true);
  }

  /**
   * Provisions this backend holds (a scale-up went out, no scale-down yet). The instances
   * themselves are the provisioner's: what it runs is outside this orchestrator's sight.
   */
  inventory(): Promise<InventoryItem[]> {
    return Promise.resolve(
      [...this.agents.keys()].map((id) => ({ kind: 'provision' as const, agentId: id, ref: id })),
    );
  }

  /** The instance's agent registered. */
  markActive(agentId: string): void {
    this.agents.get(agentId)?.markActive();
  }

  markRegistered(agentId: string): void {
    this.markActive(agentId);
  }

  /**
   * Redeem a claim code (the HTTP route for a workflow that delivers the token itself). Rejects with
   * a ClaimRefused naming why when the code is unknown, used or expired.
   */
  async claim(code: string): Promise<ClaimedCredentials> {
    const r = await this.opts.claimStore.claim(code);
    if ('error' in r) throw new ClaimRefused(r.error);
    return r;
  }

  /**
   * Emits nothing and keeps the map: a provision lives as long as the cluster, not this process. A
   * socket that closes during the rest of the shutdown can still emit its own scale-down.
   */
  shutdownAll(): Promise<void> {
    if (this.agents.size)
      this.log.info({ provisions: this.agents.size }, 'leaving event provisions to the cluster');
    return Promise.resolve();
  }

  /**
   * Always valid: label sets, maxAgents and the entry are replaced; roles, agentTokenTtlSeconds,
   * provisioningTargets and mandatoryLabels apply from the next spawn.
   */
  reload(
    labelSets: LabelSetConfig[],
    opts: { maxAgents?: number; entry?: ScalerEntry } = {},
  ): ValidationResult {
    const base = opts.entry ?? this.entry;
    this.entry = {
      ...base,
      labelSets,
      ...(opts.maxAgents !== undefined ? { maxAgents: opts.maxAgents } : {}),
    };
    if (opts.entry?.claimTtlSeconds !== undefined)
      this.opts.claimStore.setDefaultTtlSeconds(opts.entry.claimTtlSeconds);
    return { valid: true };
  }

  checkReload(entry: ScalerEntry): ValidationResult {
    const errors = checkLabelSets(entry.labelSets);
    if (entry.type !== this.type)
      errors.push(`type: a ${this.type} backend cannot take a ${entry.type} entry`);
    if (!entry.provisioningTargets?.length)
      errors.push('provisioningTargets: an event scaler needs at least one (job:<file> or webhook:<url>)');
    else {
      const problem = this.opts.checkTargets?.(entry.provisioningTargets);
      if (problem) errors.push(problem);
    }
    return errors.length ? { valid: false, errors } : { valid: true };
  }

  applyReload(entry: ScalerEntry): void {
    this.reload(entry.labelSets, { maxAgents: entry.maxAgents, entry });
  }

  noteDeliveryGivenUp(problem: DeliveryProblem): void {
    this.givenUp = problem;
  }

  deliveryProblem(): DeliveryProblem | undefined {
    return this.givenUp;
  }

  getScalerContext(agentId: string): Record<string, unknown> | undefined {
    const p = this.agents.get(agentId);
    if (!p) return undefined;
    return { backendType: 'event', scalerName: this.name, state: p.state, createdAt: p.createdAt };
  }
}
