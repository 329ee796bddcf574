import { logCaptureOf } from '../log-capture.js';
import { logAgentLine } from '../../../util/agent-output.js';
import type { LabelSetConfig, ScalerEntry } from '../../../config/index.js';
import type { CleanupOrphansOptions, InventoryItem } from '../../types.js';
import { checkLabelSets } from '../../core/label-set-check.js';
import type { Logger } from '../../../util/logger.js';
import { HOST_COMPUTE } from '../../backend-capabilities.js';
import type {
  ScalerDestroyContext,
  LogCapture,
  ManagedAgent,
  RequiredTool,
  ScalerBackend,
  SpawnContext,
  ValidationResult,
} from '../../types.js';
import type { ContainerRuntime } from '../container-runtime.js';
import { positionalMint, spawnContainerAgent } from './agent-spawn.js';
import { scalerContext } from './context.js';
import { applyAgentRules, removeAgentRules, type AgentRulesDeps } from './firewall-rules.js';
import { urlForContainer } from './network.js';
import { removeContainer, sweepScalerOrphans } from './orphans.js';
import { containerInventory } from './inventory.js';
import { adoptContainer, reapUnowned, type RecoveryDeps } from './recovery.js';
import { prepareAgentNetwork } from './startup.js';
import { containerTools } from './tools.js';
import type { ContainerScalerBackendOptions, SpawnHost, Tracked } from './tracked.js';
import { TrackedAgents } from './tracked-agents.js';
import { limitsOf, mergeHosts, resolveOptions, type ResolvedOptions } from './options.js';
import { contextFromPositional, isPositional, type PositionalSpawnArgs } from '../positional-spawn.js';

export type { ContainerScalerBackendOptions } from './tracked.js';

/** Agents as containers on Docker or Podman. */
export class ContainerScalerBackend implements ScalerBackend {
  readonly type = 'container' as const;
  readonly capabilities = HOST_COMPUTE;
  readonly name: string;
  readonly logsSource: ContainerRuntime;
  readonly spawnsOnLocalHost: boolean;
  /** Only a local engine's bridge is on this host; a remote engine's agents dial what they are told. */
  readonly agentGateway: string | undefined;
  private entry: ScalerEntry;
  private readonly agents = new TrackedAgents();
  private readonly stopping = new Map<string, Promise<void>>();
  private readonly log: Logger;
  private readonly host: SpawnHost;
  private readonly rules: AgentRulesDeps;
  private readonly recovery: RecoveryDeps;

  /** Needs docker or podman on PATH only when the engine is found by auto-detection. */
  static getRequiredTools(entry: ScalerEntry): RequiredTool[] {
    return containerTools(entry);
  }

  /** Check the firewall and the agent network first: a scaler that cannot confine agents does not start. */
  static async create(input: ContainerScalerBackendOptions): Promise<ContainerScalerBackend> {
    const opts = await resolveOptions(input);
    const log = opts.logger.child({ component: 'container-backend', scaler: opts.entry.name });
    const gateway = await prepareAgentNetwork(opts);
    return new ContainerScalerBackend(opts, log, gateway);
  }

  private constructor(
    private readonly opts: ResolvedOptions,
    log: Logger,
    gateway: string | undefined,
  ) {
    this.name = opts.entry.name;
    this.entry = opts.entry;
    this.log = log;
    this.logsSource = opts.runtime;
    this.spawnsOnLocalHost = opts.socketPath !== undefined;
    this.agentGateway = this.spawnsOnLocalHost ? gateway : undefined;
    const agentUrl = (url: string) => urlForContainer(url, gateway);
    this.rules = {
      isolation: opts.isolation,
      scalerName: this.name,
      hostServices: opts.hostServices,
      agentUrl,
      log,
    };
    this.recovery = { docker: opts.docker, scalerName: this.name, agents: this.agents, log };
    this.host = {
      name: this.name,
      docker: opts.docker,
      engineWhere: opts.socketPath ?? opts.entry.host ?? 'the configured host',
      localSocket: opts.socketPath,
      hostEnv: opts.hostEnv ?? process.env,
      extraHosts: () => mergeHosts(this.entry.extraHosts, opts.extraHosts),
      defaultLimits: limitsOf(opts.defaultResources),
      isolation: opts.isolated ? opts.isolation : undefined,
      current: (id) => this.agents.get(id),
      agentUrl,
      applyRules: (req, ls, ip) => applyAgentRules(this.rules, req, ls, ip),
      removeRules: (ip) => removeAgentRules(this.rules, ip),
      onOutput: (agentId, stream, line) =>
        logAgentLine(this.log, { agentId, stream, logsSource: this.logsSource }, line),
      warn: (agentId, msg) => this.log.warn({ agentId }, msg),
    };
  }

  get currentEntry(): ScalerEntry {
    return this.entry;
  }

  getActiveCount(): number {
    return this.agents.size;
  }

  getRequiredTools(entry: ScalerEntry): RequiredTool[] {
    return containerTools(entry);
  }

  getLogCapture(agentId: string): LogCapture | undefined {
    const t = this.agents.get(agentId);
    return t ? logCaptureOf(t.tail) : undefined;
  }

  /**
   * The port form takes one context object (the manager's); the positional form is the public
   * one, and mints the agent's token through `tokenStore` when one was given.
   */
  spawn(ctx: SpawnContext): Promise<ManagedAgent>;
  spawn(...args: PositionalSpawnArgs): Promise<ManagedAgent>;
  async spawn(...args: [SpawnContext] | PositionalSpawnArgs): Promise<ManagedAgent> {
    if (!isPositional(args)) return this.spawnAgent(args[0]);
    const mint = positionalMint(this.opts.tokenStore, this.opts.tokenTtlMs);
    return this.spawnAgent(await contextFromPositional(this.entry, args, { mint }));
  }

  private spawnAgent(req: SpawnContext): Promise<ManagedAgent> {
    return spawnContainerAgent(this.host, this.entry, this.agents, req);
  }

  markRegistered(agentId: string): void {
    const t = this.agents.get(agentId);
    if (t) t.registered = true;
  }

  /** Tracking goes first, before any await: the active count drops at once and a spawn sees it. */
  destroy(agentId: string, ctx: ScalerDestroyContext = {}): Promise<void> {
    const under = this.stopping.get(agentId);
    if (under) return under;
    const t = this.agents.get(agentId);
    if (!t) return Promise.resolve();
    t.destroying = true;
    t.agent.state = 'destroying';
    this.agents.forget(agentId);
    this.log.info({ agentId, reason: ctx.reason, container: t.containerId }, 'removing agent container');
    const run = this.teardown(t).finally(() => this.stopping.delete(agentId));
    this.stopping.set(agentId, run);
    return run;
  }

  private async teardown(t: Tracked): Promise<void> {
    if (t.ip) await removeAgentRules(this.rules, t.ip);
    t.logs?.close();
    t.tail.end();
    // Still being created: the spawn notices and removes it; never send an empty id to the engine.
    if (!t.containerId) return;
    await removeContainer(this.opts.docker, t.containerId, this.opts.stopSeconds ?? 10);
  }

  async shutdownAll(): Promise<void> {
    await Promise.allSettled([...this.agents.ids()].map((id) => this.destroy(id, { reason: 'shutdown' })));
  }

  checkReload(entry: ScalerEntry): ValidationResult {
    const errors = [
      ...checkLabelSets(entry.labelSets),
      ...entry.labelSets.flatMap((ls, i) =>
        ls.image ? [] : [`Label set [${i}] requires an 'image' field for container backend`],
      ),
    ];
    if (entry.type !== this.type)
      errors.push(`type: a ${this.type} backend cannot take a ${entry.type} entry`);
    return errors.length ? { valid: false, errors } : { valid: true };
  }

  applyReload(entry: ScalerEntry): void {
    this.entry = entry;
  }

  /** The port's reload in one call: check, then apply only when valid. */
  reload(
    labelSets: LabelSetConfig[],
    opts: { maxAgents?: number; entry?: ScalerEntry } = {},
  ): ValidationResult {
    const next: ScalerEntry = {
      ...(opts.entry ?? this.entry),
      labelSets,
      ...(opts.maxAgents ? { maxAgents: opts.maxAgents } : {}),
    };
    const r = this.checkReload(next);
    if (r.valid) this.applyReload(next);
    return r;
  }

  getScalerContext(agentId: string): Record<string, unknown> | undefined {
    const t = this.agents.get(agentId);
    return t ? scalerContext(this.entry, t, this.logsSource) : undefined;
  }

  /**
   * Remove this scaler's containers that no live agent owns, then stale firewall rule sets. With
   * `dryRun` nothing is removed; every item is reported to `onItem` either way.
   */
  async cleanupOrphans(
    isRegistered: (agentId: string) => boolean = () => true,
    opts: CleanupOrphansOptions = {},
  ): Promise<number> {
    const trackedIps = [...this.agents.all()].flatMap((t) => (t.ip ? [t.ip] : []));
    return sweepScalerOrphans(
      {
        docker: this.opts.docker,
        scalerName: this.name,
        tracked: new Set(this.agents.ids()),
        trackedIps,
        isRegistered,
        isolation: this.host.isolation ? this.opts.isolation : undefined,
        log: this.log,
      },
      opts,
    );
  }

  /** This scaler's containers that are up, and (isolation on) the rule sets on this engine's network. */
  inventory(): Promise<InventoryItem[]> {
    return containerInventory(
      this.opts.docker,
      this.name,
      this.host.isolation ? this.opts.isolation : undefined,
    );
  }

  /** Remove containers this scaler started for `agentId` (a registration the orchestrator refused). */
  reapUnowned(agentId: string): Promise<boolean> {
    return reapUnowned(this.recovery, agentId);
  }

  /** Re-track a container that survived an orchestrator restart, if it still runs as this agent. */
  adopt(agentId: string, labelSet: string[], backendRef: string | null): Promise<boolean> {
    return adoptContainer(this.recovery, agentId, labelSet, backendRef);
  }
}
