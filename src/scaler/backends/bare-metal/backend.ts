import { isAbsolute, resolve } from 'node:path';
import { homedir } from 'node:os';
import type { LabelSetConfig, ScalerEntry } from '../../../config/index.js';
import type { Logger } from '../../../util/logger.js';
import { swallow } from '../../../util/swallowed-errors.js';
import { HOST_COMPUTE } from '../../backend-capabilities.js';
import type {
  CleanupOrphansOptions,
  DestroyContext,
  InventoryItem,
  LaterWork,
  LogCapture,
  ManagedAgent,
  RequiredTool,
  ScalerBackend,
  SpawnContext as SpawnRequest,
  ValidationResult,
} from '../../types.js';
import { bareMetalTools } from './tools.js';
import { limitsFromOptions, type AgentLimits } from './agent-limits.js';
import type { LaunchDeps } from './process-launch.js';
import { reloadErrors } from './reload-check.js';
import { AgentUserPool } from './users.js';
import { constructionWarnings } from './warnings.js';
import type { HostFacts } from './confinement.js';
import { modeIn, planConfinement, type ConfinementPlan } from './confinement-plan.js';
import { probeHostFacts } from './host-probe.js';
import { SealedRuntime } from './sealed-runtime.js';
import type { BareMetalBackendOptions } from './options.js';
import { ProcessAgents, type ProcessParts } from './process-agents.js';
import { announceLimits, announcedPlan, confinementView, limitsView } from './policy-report.js';
import { AgentRecovery } from './recovery.js';
import { spawnAgent, type SpawnHost } from './spawn.js';

export type { BareMetalBackendOptions } from './options.js';

const BARE_METAL_CAPABILITIES = Object.freeze({ ...HOST_COMPUTE, provisionalLaunch: true });

/**
 * Agents as host processes. Each agent runs in its own process group so destroy reaches everything
 * it started. This mode has no network isolation: agents share the host's network and filesystem.
 */
export class BareMetalScalerBackend implements ScalerBackend {
  readonly type = 'bare-metal' as const;
  /** Its spawner undoes a start whose record was never written (spawner-main.ts). */
  readonly capabilities = BARE_METAL_CAPABILITIES;
  readonly name: string;
  /** The config in force for new spawns; replaced whole by applyReload. */
  private entry: ScalerEntry;
  /** Teardowns under way, so a repeated or concurrent destroy waits for the same one. */
  private readonly stopping = new Map<string, Promise<void>>();
  private readonly log: Logger;
  /** How this scaler's agent limits are applied; fixed for the scaler's life. */
  private readonly limits: AgentLimits;
  private readonly users: AgentUserPool;
  /** One execute-only Node for every agent of this scaler, made on first use. */
  private readonly runtime = new SealedRuntime((msg) => this.log.warn(msg));
  private readonly hostFacts: HostFacts;
  /** How each process-mode label set's jobs are confined; replaced with the entry on reload. */
  private plan: ConfinementPlan;
  /** The agent processes (the job-image containers are opts.jobImage's). */
  private readonly processes: ProcessAgents;
  /** Agents on the host that this backend does not hold: adopted, reaped, swept and listed there. */
  private readonly recovery: AgentRecovery;
  private readonly spawnHost: SpawnHost;

  constructor(private readonly opts: BareMetalBackendOptions) {
    this.name = opts.entry.name;
    this.entry = opts.entry;
    this.log = opts.logger.child({ component: 'bare-metal-backend', scaler: this.name });
    this.users = opts.users ?? new AgentUserPool();
    this.hostFacts = opts.hostFacts ?? probeHostFacts(this.hostEnv);
    this.plan = announcedPlan(this.log, opts.entry, this.hostFacts, this.hostEnv);
    for (const w of constructionWarnings(opts.entry, this.plan)) this.log.warn(w);
    this.limits = opts.limits ?? limitsFromOptions(opts.entry.enforceCgroups === true, opts.cgroups);
    announceLimits(this.log, this.name, this.limits);
    const parts: ProcessParts = {
      scaler: this.name,
      log: this.log,
      users: this.users,
      limits: this.limits,
      stopGraceMs: opts.stopGraceMs,
      placeLeft: (id) => this.placeLeft(id),
      cgroupLeft: (id) => this.cgroupLeft(id),
    };
    this.processes = new ProcessAgents(parts);
    this.recovery = new AgentRecovery(this.processes, {
      ...parts,
      jobImage: opts.jobImage,
      spawnerPid: () => opts.spawner?.pid,
    });
    this.spawnHost = {
      ...parts,
      processes: this.processes,
      jobImage: opts.jobImage,
      entry: () => this.entry,
      hostEnv: () => this.hostEnv,
      activeCount: () => this.getActiveCount(),
      binaryPathFor: (ls) => this.binaryPathFor(ls),
      launchDeps: () => this.launchDeps,
    };
  }

  /** Read-only: which mechanism holds the agents' limits, and what to do when none can. */
  limitsEnforcement(): { strategy: string; enforced: boolean; message: string; fix: string | null } {
    return limitsView(this.limits);
  }

  /** Read-only: each process-mode label set's confinement, and the risk of an unconfined one. */
  confinement(): { labelSet: string; mode: string; chosen: string; risk: string | null }[] {
    return confinementView(this.name, this.plan);
  }

  /**
   * Job-image agents run in containers that reach the host at their bridge's gateway (their spawn
   * points them there); process agents stay on the scaler's own URL, hence the 'containers' scope.
   */
  get agentGateway(): string | undefined {
    return this.opts.jobImage?.agentGateway;
  }
  readonly agentGatewayScope = 'containers' as const;

  private get hostEnv(): NodeJS.ProcessEnv {
    return this.opts.hostEnv ?? process.env;
  }

  getActiveCount(): number {
    return this.processes.size + (this.opts.jobImage?.size ?? 0);
  }

  binaryPathFor(ls: LabelSetConfig): string | undefined {
    if (!ls.binaryPath) return undefined;
    return isAbsolute(ls.binaryPath) ? ls.binaryPath : resolve(this.opts.baseDir, ls.binaryPath);
  }

  getRequiredTools(entry: ScalerEntry): RequiredTool[] {
    return bareMetalTools(entry, this.opts.baseDir, this.opts.hostEnv ?? process.env);
  }

  getLogCapture(agentId: string): LogCapture | undefined {
    if (this.opts.jobImage?.has(agentId)) return this.opts.jobImage.logCapture(agentId);
    return this.processes.logCapture(agentId);
  }

  // Not async itself: spawnAgent's own promise is the one handed back, so the start takes no extra turn.
  spawn(req: SpawnRequest): Promise<ManagedAgent> {
    return spawnAgent(this.spawnHost, req);
  }

  private get launchDeps(): LaunchDeps {
    return {
      users: this.users,
      secrets: {
        dataDir: this.opts.dataDir,
        files: this.opts.secretFiles ?? [],
        home: this.hostEnv.HOME || homedir(),
      },
      modeOf: (ls) => modeIn(this.plan, ls),
      hostEnv: this.hostEnv,
      limits: this.limits,
      runtime: this.runtime,
      placeLeft: (id) => this.placeLeft(id),
      cgroupLeft: (id) => this.cgroupLeft(id),
      spawner: this.opts.spawner,
      forkerIsRoot: this.hostFacts.root,
    };
  }

  markRegistered(agentId: string, later?: LaterWork): void {
    this.opts.jobImage?.markRegistered(agentId);
    this.processes.markRegistered(agentId, later);
  }

  destroy(agentId: string, ctx: DestroyContext): Promise<void> {
    const under = this.stopping.get(agentId);
    if (under) return under;
    const stop = this.opts.jobImage?.has(agentId)
      ? this.opts.jobImage.destroy(agentId)
      : this.processes.stop(agentId, ctx.reason);
    if (!stop) return Promise.resolve();
    const run = stop.finally(() => this.stopping.delete(agentId));
    this.stopping.set(agentId, run);
    return run;
  }

  /** Limits are enforced only where the operator asked for it and this host has a way to. */
  get enforcesLimits(): boolean {
    return this.limits.enforced;
  }

  adopt(agentId: string, labelSet: string[], backendRef: string | null): Promise<boolean> {
    return this.recovery.adopt(agentId, labelSet, backendRef);
  }

  reapUnowned(agentId: string, backendRef: string | null): Promise<boolean> {
    return this.recovery.reapUnowned(agentId, backendRef);
  }

  cleanupOrphans(
    isRegistered: (agentId: string) => boolean,
    opts: CleanupOrphansOptions = {},
  ): Promise<number> {
    return this.recovery.cleanupOrphans(isRegistered, opts);
  }

  inventory(): Promise<InventoryItem[]> {
    return this.recovery.inventory();
  }

  private placeLeft(agentId: string) {
    return swallow(this.log, 'scaler.bare-metal.unplace', { agentId });
  }

  /** A cgroup that could not be removed is left behind (empty or not): logged and counted. */
  private cgroupLeft(agentId: string) {
    return swallow(this.log, 'scaler.bare-metal.cgroup-remove', { agentId });
  }

  checkReload(entry: ScalerEntry): ValidationResult {
    const errors = [
      ...reloadErrors(entry, this.entry, this.opts.jobImage !== undefined),
      ...planConfinement(entry, this.hostFacts, this.hostEnv).errors,
    ];
    return errors.length ? { valid: false, errors } : { valid: true };
  }

  applyReload(entry: ScalerEntry): void {
    this.entry = entry;
    this.plan = announcedPlan(this.log, entry, this.hostFacts, this.hostEnv);
    for (const w of constructionWarnings(entry, this.plan, false)) this.log.warn(w);
  }

  /** Orchestrator lifetime: host processes do not outlive the orchestrator that started them. */
  async shutdownAll(): Promise<void> {
    await Promise.allSettled(this.processes.ids().map((id) => this.destroy(id, { reason: 'shutdown' })));
    await this.users.close().catch(this.placeLeft('spare'));
    await this.opts.jobImage?.shutdownAll();
    this.release();
  }

  release(): void {
    this.opts.spawner?.close();
  }

  getScalerContext(agentId: string): Record<string, unknown> | undefined {
    const container = this.opts.jobImage?.containerOf(agentId);
    if (container) return { backendType: 'bare-metal', scalerName: this.name, mode: 'job-image', container };
    if (!this.processes.holds(agentId)) return undefined;
    return { backendType: 'bare-metal', scalerName: this.name, pid: this.processes.pgidOf(agentId) };
  }
}
