import { errorMessage } from '../../../util/errors.js';
import { logCaptureOf } from '../log-capture.js';
import { logAgentLine } from '../../../util/agent-output.js';
import { normalizeLabelSet, type LabelSetConfig, type ScalerEntry } from '../../../config/index.js';
import { IsolationError } from '../../../net/isolation.js';
import { warnIsolationOff } from '../../../net/nft-preflight.js';
import type { CleanupOrphansOptions, InventoryItem } from '../../types.js';
import { checkLabelSets } from '../../core/label-set-check.js';
import { DeterministicSpawnError, SpawnError } from '../../core/spawn-errors.js';
import type { Logger } from '../../../util/logger.js';
import type {
  BackendCapabilities,
  ScalerDestroyContext,
  LogCapture,
  ManagedAgent,
  RequiredTool,
  ScalerBackend,
  SpawnContext,
  ValidationResult,
} from '../../types.js';
import type { ContainerRuntime } from '../container-runtime.js';
import { scalerContext } from './context.js';
import { LineTail } from './logs.js';
import {
  ensureIsolatedNetwork,
  ISOLATED_NETWORK_GATEWAY,
  networkGateway,
  urlForContainer,
} from './network.js';
import { listScalerContainers, removeContainer, sweepScalerOrphans } from './orphans.js';
import { containerInventory } from './inventory.js';
import { failSpawn, runSpawn, watchExit } from './spawn.js';
import { containerTools } from './tools.js';
import type { ContainerScalerBackendOptions, SpawnHost, Tracked } from './tracked.js';
import {
  DEFAULT_TOKEN_TTL_MS,
  limitsOf,
  mergeHosts,
  resolveOptions,
  type ResolvedOptions,
} from './options.js';
import { contextFromPositional, isPositional, type PositionalSpawnArgs } from '../positional-spawn.js';

export type { ContainerScalerBackendOptions } from './tracked.js';

/** Agents as containers on Docker or Podman. */
export class ContainerScalerBackend implements ScalerBackend {
  readonly type = 'container' as const;
  readonly capabilities: BackendCapabilities = {
    localCompute: true,
    lifetime: 'orchestrator',
    cleansOrphans: true,
    capturesLogs: true,
  };
  readonly name: string;
  readonly logsSource: ContainerRuntime;
  readonly spawnsOnLocalHost: boolean;
  /** Only a local engine's bridge is on this host; a remote engine's agents dial what they are told. */
  readonly agentGateway: string | undefined;
  private entry: ScalerEntry;
  private readonly agents = new Map<string, Tracked>();
  private readonly stopping = new Map<string, Promise<void>>();
  private readonly log: Logger;
  private readonly host: SpawnHost;

  /** Needs docker or podman on PATH only when the engine is found by auto-detection. */
  static getRequiredTools(entry: ScalerEntry): RequiredTool[] {
    return containerTools(entry);
  }

  /** Check the firewall and the agent network first: a scaler that cannot confine agents does not start. */
  static async create(input: ContainerScalerBackendOptions): Promise<ContainerScalerBackend> {
    const opts = await resolveOptions(input);
    const log = opts.logger.child({ component: 'container-backend', scaler: opts.entry.name });
    let gateway: string | undefined;
    if (opts.isolated) {
      if (!opts.isolation)
        throw new Error(
          `scaler "${opts.entry.name}": networkIsolation is on but no nftables firewall is available; install nftables (apt-get install nftables) and run the orchestrator with CAP_NET_ADMIN, or set networkIsolation: false in this scaler's entry`,
        );
      await opts.isolation.prepare?.();
      await ensureIsolatedNetwork(opts.docker);
      gateway = ISOLATED_NETWORK_GATEWAY;
    } else {
      // Once per scaler: a reload rebuilding the backend does not repeat it.
      warnIsolationOff(opts.logger, opts.entry.name);
      gateway = await networkGateway(opts.docker, opts.runtime === 'podman' ? 'podman' : 'bridge');
    }
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
      agentUrl: (url) => urlForContainer(url, gateway),
      applyRules: (req, ls, ip) => this.applyRules(req, ls, ip),
      removeRules: (ip) => this.removeRules(ip),
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
    const { tokenStore, tokenTtlMs } = this.opts;
    const mint = tokenStore
      ? async (agentId: string, labels: string[]) =>
          (
            await tokenStore.mint({
              agentId,
              labels,
              kind: 'ephemeral',
              ttlMs: tokenTtlMs ?? DEFAULT_TOKEN_TTL_MS,
              now: new Date(),
            })
          ).token
      : undefined;
    return this.spawnAgent(await contextFromPositional(this.entry, args, { mint }));
  }

  private async spawnAgent(req: SpawnContext): Promise<ManagedAgent> {
    const key = normalizeLabelSet(req.labelSet);
    const ls = this.entry.labelSets.find((l) => normalizeLabelSet(l.labels) === key);
    if (!ls)
      throw new SpawnError('config', `Label set [${key}] not supported by container backend "${this.name}"`);
    if (this.agents.size >= this.entry.maxAgents)
      throw new SpawnError(
        'capacity',
        `container backend "${this.name}" at capacity (${this.agents.size}/${this.entry.maxAgents})`,
      );
    if (req.auth.kind !== 'token')
      throw new DeterministicSpawnError(
        'config',
        'container agents authenticate with a token, not a claim code',
      );
    if (req.signal.aborted) throw new SpawnError('spawn-timeout', 'spawn aborted before it started');
    const agent: ManagedAgent = {
      id: req.agentId,
      labelSet: req.labelSet,
      backendRef: '',
      spawnedAt: Date.now(),
      state: 'spawning',
    };
    const t: Tracked = {
      agent,
      tail: new LineTail(),
      registered: false,
      destroying: false,
      image: req.image ?? ls.image!,
    };
    this.agents.set(req.agentId, t);
    try {
      await runSpawn(this.host, req, ls, t);
    } catch (err) {
      const failure = await failSpawn(this.host, req, t, err);
      if (this.agents.get(req.agentId) === t) this.agents.delete(req.agentId);
      t.tail.end();
      throw failure;
    }
    agent.state = 'running';
    watchExit(this.opts.docker, req, t);
    req.onEvent('agent.connecting', 'waiting for the agent to register');
    return agent;
  }

  private async applyRules(req: SpawnContext, ls: LabelSetConfig, ip: string): Promise<void> {
    const url = new URL(this.host.agentUrl(req.orchestratorUrl));
    const port = Number(url.port) || (url.protocol === 'wss:' || url.protocol === 'https:' ? 443 : 80);
    try {
      await this.opts.isolation!.apply({
        agentId: req.agentId,
        scalerName: this.name,
        ip,
        orchestrator: { address: url.hostname, port },
        hostAccess: this.opts.hostServices ?? [],
        policy: ls.networkPolicy,
      });
    } catch (err) {
      // Classified, with the fix: a name in orchestratorUrl is a config error, an nft failure may pass.
      if (!(err instanceof IsolationError)) throw err;
      const kind = err.kind === 'config' ? 'config' : 'transient';
      throw new SpawnError(kind, `${err.message}. Fix: ${err.remedy}`, { cause: err });
    }
  }

  private async removeRules(ip: string): Promise<void> {
    await this.opts.isolation
      ?.remove(ip)
      .catch((err: unknown) => this.log.warn({ ip, err: String(err) }, 'could not remove firewall rules'));
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
    this.agents.delete(agentId);
    this.log.info({ agentId, reason: ctx.reason, container: t.containerId }, 'removing agent container');
    const run = this.teardown(t).finally(() => this.stopping.delete(agentId));
    this.stopping.set(agentId, run);
    return run;
  }

  private async teardown(t: Tracked): Promise<void> {
    if (t.ip) await this.removeRules(t.ip);
    t.logs?.close();
    t.tail.end();
    // Still being created: the spawn notices and removes it; never send an empty id to the engine.
    if (!t.containerId) return;
    await removeContainer(this.opts.docker, t.containerId, this.opts.stopSeconds ?? 10);
  }

  async shutdownAll(): Promise<void> {
    await Promise.allSettled([...this.agents.keys()].map((id) => this.destroy(id, { reason: 'shutdown' })));
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
    const trackedIps = [...this.agents.values()].flatMap((t) => (t.ip ? [t.ip] : []));
    return sweepScalerOrphans(
      {
        docker: this.opts.docker,
        scalerName: this.name,
        tracked: new Set(this.agents.keys()),
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
  async reapUnowned(agentId: string): Promise<boolean> {
    if (this.agents.has(agentId)) return false;
    let found;
    try {
      found = await listScalerContainers(this.opts.docker, this.name, agentId);
    } catch (err) {
      this.log.warn({ agentId, err: String(err) }, 'cannot list containers to reap');
      return false;
    }
    const removed = await Promise.all(found.map((c) => removeContainer(this.opts.docker, c.Id, 0)));
    return removed.some(Boolean);
  }

  /** Re-track a container that survived an orchestrator restart, if it still runs as this agent. */
  async adopt(agentId: string, labelSet: string[], backendRef: string | null): Promise<boolean> {
    let found;
    try {
      found = await listScalerContainers(this.opts.docker, this.name, agentId);
    } catch (err) {
      // An engine that does not answer says nothing about the container: the caller keeps the record.
      throw new Error(`cannot list containers to adopt ${agentId}: ${errorMessage(err)}`, { cause: err });
    }
    const c = found.find((x) => x.State === 'running' && (!backendRef || x.Id === backendRef));
    if (!c) return false;
    const agent: ManagedAgent = {
      id: agentId,
      labelSet,
      backendRef: c.Id,
      spawnedAt: Date.now(),
      state: 'running',
    };
    const ip = c.NetworkSettings?.Networks?.['kici-agent-net']?.IPAddress || undefined;
    this.agents.set(agentId, {
      agent,
      containerId: c.Id,
      ...(ip ? { ip } : {}),
      tail: new LineTail(),
      registered: false,
      destroying: false,
      image: c.Image,
    });
    return true;
  }
}
