import { logCaptureOf } from '../log-capture.js';
import { agentLineForJob, logAgentLine } from '../../../util/agent-output.js';
import { isAbsolute, resolve } from 'node:path';
import { normalizeLabelSet, type LabelSetConfig, type ScalerEntry } from '../../../config/index.js';
import type { Logger } from '../../../util/logger.js';
import { swallow } from '../../../util/swallowed-errors.js';
import { DeterministicSpawnError, SpawnError } from '../../core/spawn-errors.js';
import type {
  BackendCapabilities,
  CleanupOrphansOptions,
  DestroyContext,
  InventoryItem,
  LogCapture,
  ManagedAgent,
  RequiredTool,
  ScalerBackend,
  SpawnContext as SpawnRequest,
  ValidationResult,
} from '../../types.js';
import { onLines } from '../../../util/lines.js';
import { bareMetalTools } from './tools.js';
import { buildAgentEnv } from './env.js';
import type { CgroupDriver } from './cgroups.js';
import { limitsFromOptions, type AgentLimits } from './agent-limits.js';
import { launchAgentProcess, type LaunchDeps } from './process-launch.js';
import { recoveredPlacement, unplace, type Placement } from './placement.js';
import { reloadErrors } from './reload-check.js';
import { AgentUserPool } from './users.js';
import { constructionWarnings } from './warnings.js';
import { isJobImageSet, type JobImageAgents } from './job-image.js';
import type { HostFacts } from './confinement.js';
import {
  describeConfinement,
  hostTrustRisk,
  modeIn,
  planConfinement,
  type ConfinementPlan,
} from './confinement-plan.js';
import { probeHostFacts } from './host-probe.js';
import { homedir } from 'node:os';
import { findOrphanAgents, listAgentProcesses } from './orphans.js';
import { findAgentPid, groupAlive, processBelongsToAgent, stopAgentTree } from './process-group.js';
import { startTicksOf } from '../../../util/proc-tree.js';
import { SealedRuntime } from './sealed-runtime.js';
import type { AgentChild } from './spawner/agent-child.js';
import type { AgentSpawner } from './spawner/agent-spawner.js';

export interface BareMetalBackendOptions {
  entry: ScalerEntry;
  logger: Logger;
  /** Relative `binaryPath`s are resolved against this directory (the config file's). */
  baseDir: string;
  hostEnv?: NodeJS.ProcessEnv;
  /** Grace between SIGTERM and SIGKILL on destroy. */
  stopGraceMs?: number;
  /** How limits are applied, chosen at start-up (see choose-limits.ts); wins over `cgroups`. */
  limits?: AgentLimits | undefined;
  /** Cgroup driver for `enforceCgroups: true` (injected; see detectCgroups). */
  cgroups?: CgroupDriver | undefined;
  /** Homes and uids for sandboxed and `runAsUser: dynamic` agents (host-wide by default). */
  users?: AgentUserPool;
  /** The orchestrator's data dir: hidden from sandboxed agents. */
  dataDir?: string | undefined;
  /** Agent containers of the job-image label sets; absent when the scaler has none. */
  jobImage?: JobImageAgents | undefined;
  /** What the host allows for confining jobs (probed when absent). */
  hostFacts?: HostFacts;
  /** Files no job may read (admin token, TLS key): hidden in the sandbox. */
  secretFiles?: readonly string[];
  /** Starts agent processes outside the orchestrator (see spawner/); this backend closes it at shutdown. */
  spawner?: AgentSpawner | undefined;
}

interface Tracked {
  agent: ManagedAgent;
  child?: AgentChild;
  pgid?: number;
  /** The agent process's start time (/proc clock ticks), where it could be read: narrows teardown's scan. */
  startTicks?: number | undefined;
  registered: boolean;
  destroying: boolean;
  tail: string[];
  placement: Placement;
}

const TAIL_LINES = 50;

/**
 * Agents as host processes. Each agent runs in its own process group so destroy reaches everything
 * it started. This mode has no network isolation: agents share the host's network and filesystem.
 */
export class BareMetalScalerBackend implements ScalerBackend {
  readonly type = 'bare-metal' as const;
  readonly capabilities: BackendCapabilities = {
    localCompute: true,
    lifetime: 'orchestrator',
    cleansOrphans: true,
    capturesLogs: true,
  };
  readonly name: string;
  /** The config in force for new spawns; replaced whole by applyReload. */
  private entry: ScalerEntry;
  private readonly agents = new Map<string, Tracked>();
  /** Teardowns under way, so a repeated or concurrent destroy waits for the same one. */
  private readonly stopping = new Map<string, Promise<void>>();
  private readonly log: Logger;

  constructor(private readonly opts: BareMetalBackendOptions) {
    this.name = opts.entry.name;
    this.entry = opts.entry;
    this.log = opts.logger.child({ component: 'bare-metal-backend', scaler: this.name });
    this.users = opts.users ?? new AgentUserPool();
    this.hostFacts = opts.hostFacts ?? probeHostFacts(this.hostEnv);
    this.plan = this.confinementFor(opts.entry);
    for (const w of constructionWarnings(opts.entry, this.plan)) this.log.warn(w);
    this.limits = opts.limits ?? limitsFromOptions(opts.entry.enforceCgroups === true, opts.cgroups);
    // Said once, at start-up: the operator asked for limits this host cannot (fully) give.
    const advisory = this.limits.advisory;
    if (advisory)
      this.log.warn(
        { limits: this.limits.strategy, fix: advisory.fix },
        `scaler "${this.name}": ${advisory.problem}. Fix: ${advisory.fix}`,
      );
    if (this.limits.enforced)
      this.log.info(
        { limits: this.limits.strategy },
        `scaler "${this.name}": limits ${this.limits.describe()}`,
      );
  }

  /** How this scaler's agent limits are applied; fixed for the scaler's life. */
  private readonly limits: AgentLimits;

  /** Read-only: which mechanism holds the agents' limits, and what to do when none can. */
  limitsEnforcement(): { strategy: string; enforced: boolean; message: string; fix: string | null } {
    return {
      strategy: this.limits.strategy,
      enforced: this.limits.enforced,
      message: this.limits.describe(),
      fix: this.limits.advisory?.fix ?? null,
    };
  }

  private readonly users: AgentUserPool;
  /** One execute-only Node for every agent of this scaler, made on first use. */
  private readonly runtime = new SealedRuntime((msg) => this.log.warn(msg));
  private readonly hostFacts: HostFacts;
  /** How each process-mode label set's jobs are confined; replaced with the entry on reload. */
  private plan: ConfinementPlan;

  /** The plan for `entry`, said in the log: which mechanism confines each set's jobs, and why. */
  private confinementFor(entry: ScalerEntry): ConfinementPlan {
    const plan = planConfinement(entry, this.hostFacts, this.hostEnv);
    for (const s of plan.sets) {
      if (s.mode === 'host')
        this.log.warn({ labelSet: s.labelSet, confinement: s.mode }, hostTrustRisk(entry.name, s));
      else this.log.info({ labelSet: s.labelSet, confinement: s.mode }, describeConfinement(entry.name, s));
    }
    return plan;
  }

  /** Read-only: each process-mode label set's confinement, and the risk of an unconfined one. */
  confinement(): { labelSet: string; mode: string; chosen: string; risk: string | null }[] {
    return this.plan.sets.map((s) => ({
      labelSet: s.labelSet,
      mode: s.mode,
      chosen: s.chosen,
      risk: s.mode === 'host' ? hostTrustRisk(this.name, s) : null,
    }));
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
    return this.agents.size + (this.opts.jobImage?.size ?? 0);
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
    const t = this.agents.get(agentId);
    return t ? logCaptureOf({ kept: () => t.tail.slice(-TAIL_LINES) }) : undefined;
  }

  async spawn(req: SpawnRequest): Promise<ManagedAgent> {
    const key = normalizeLabelSet(req.labelSet);
    const ls = this.entry.labelSets.find((l) => normalizeLabelSet(l.labels) === key);
    if (!ls)
      throw new SpawnError('config', `label set [${key}] is not served by bare-metal scaler "${this.name}"`);
    if (this.getActiveCount() >= this.entry.maxAgents) {
      throw new SpawnError(
        'capacity',
        `bare-metal scaler "${this.name}" is at capacity (${this.getActiveCount()}/${this.entry.maxAgents})`,
      );
    }
    if (isJobImageSet(ls)) return this.spawnContainer(req, ls, key);
    const binary = this.binaryPathFor(ls);
    if (!binary) {
      throw new DeterministicSpawnError(
        'config',
        `label set [${key}] has no binaryPath (job-image mode needs a container runtime)`,
      );
    }
    const agent: ManagedAgent = {
      id: req.agentId,
      labelSet: req.labelSet,
      backendRef: '',
      spawnedAt: Date.now(),
      state: 'spawning',
    };
    if (req.signal.aborted) throw new SpawnError('spawn-timeout', 'spawn aborted before it started');
    if (req.auth.kind !== 'token') {
      throw new DeterministicSpawnError(
        'config',
        'bare-metal agents authenticate with a token, not a claim code',
      );
    }
    const tracked: Tracked = { agent, registered: false, destroying: false, tail: [], placement: {} };
    this.agents.set(req.agentId, tracked);
    req.onEvent('scaler.provisioning', 'spawning agent process');
    const { env, trusted } = buildAgentEnv(this.hostEnv, ls, {
      orchestratorUrl: req.orchestratorUrl,
      agentId: req.agentId,
      fullLabels: req.fullLabels,
    });
    if (trusted)
      this.log.warn({ agentId: req.agentId }, 'agent started with the trusted environment profile');

    let child: AgentChild;
    try {
      child = await launchAgentProcess(req, ls, binary, env, req.auth.token, tracked, this.launchDeps);
    } catch (err) {
      this.agents.delete(req.agentId);
      throw err;
    }
    child.unref();
    const pid = child.pid;
    tracked.child = child;
    tracked.pgid = pid;
    tracked.startTicks = startTicksOf(pid);
    agent.backendRef = String(pid);
    agent.state = 'running';
    this.capture(tracked, child, req.onEvent);
    // 'close' comes after the output streams ended, so the failure message carries the whole tail.
    child.onClose((code, signal) => this.onExit(req, tracked, code, signal));
    if (req.signal.aborted || tracked.destroying) {
      // Abandoned (deadline, or destroy() ran before the process existed) while starting: it must not outlive that.
      this.agents.delete(req.agentId);
      await stopAgentTree(req.agentId, pid, this.opts.stopGraceMs, tracked.startTicks);
      await this.limits.release(req.agentId).catch(this.cgroupLeft(req.agentId));
      await unplace(req.agentId, tracked.placement, this.users).catch(this.placeLeft(req.agentId));
      throw new SpawnError('spawn-timeout', 'spawn aborted');
    }
    req.onEvent('scaler.ready', `agent process started (PID ${pid})`);
    req.onEvent('agent.connecting', 'waiting for the agent to register');
    return agent;
  }

  /** Job-image mode: the agent runs in a container (the job's image, our runtime injected). */
  private async spawnContainer(req: SpawnRequest, ls: LabelSetConfig, key: string): Promise<ManagedAgent> {
    if (!this.opts.jobImage)
      throw new DeterministicSpawnError(
        'config',
        `label set [${key}] is job-image mode (image, no binaryPath) but scaler "${this.name}" has no container runtime; restart after fixing the runtime and nft`,
      );
    if (req.auth.kind !== 'token')
      throw new DeterministicSpawnError(
        'config',
        'bare-metal agents authenticate with a token, not a claim code',
      );
    if (req.signal.aborted) throw new SpawnError('spawn-timeout', 'spawn aborted before it started');
    const agent: ManagedAgent = {
      id: req.agentId,
      labelSet: req.labelSet,
      backendRef: '',
      spawnedAt: Date.now(),
      state: 'spawning',
    };
    return this.opts.jobImage.spawn(req, ls, agent);
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
    };
  }

  /** The agent's own output goes to our log at info and, as system lines, to its bound job's log. */
  private capture(t: Tracked, child: AgentChild, onEvent: SpawnRequest['onEvent']): void {
    const log = this.log.child({ agentId: t.agent.id, logsSource: 'bare-metal' });
    for (const [name, stream] of [
      ['stdout', child.stdout],
      ['stderr', child.stderr],
    ] as const) {
      onLines(stream, (line) => {
        t.tail.push(line);
        if (t.tail.length > TAIL_LINES) t.tail.shift();
        logAgentLine(log, { stream: name }, line);
        onEvent('agent.output', agentLineForJob(name, line));
      });
    }
  }

  private onExit(req: SpawnRequest, t: Tracked, code: number | null, signal: NodeJS.Signals | null): void {
    // Tracking stays until the manager's destroy(): that is what removes the cgroup and what the
    // active count must include until then.
    if (t.registered || t.destroying) return;
    const how = signal ? `signal ${signal}` : `code ${code}`;
    const tail = t.tail.slice(-10).join('\n');
    req.onEvent(
      'scaler.failed',
      `agent process exited with ${how} before it registered${tail ? `\n---\n${tail}` : ''}`,
    );
  }

  markRegistered(agentId: string): void {
    this.opts.jobImage?.markRegistered(agentId);
    const t = this.agents.get(agentId);
    if (!t) return;
    t.registered = true;
    // Its start is over: the next agent's uid and home are claimed now, off that agent's start.
    if (t.placement.user) this.users.prepareSpare();
  }

  destroy(agentId: string, ctx: DestroyContext): Promise<void> {
    const under = this.stopping.get(agentId);
    if (under) return under;
    if (this.opts.jobImage?.has(agentId)) {
      const run = this.opts.jobImage.destroy(agentId).finally(() => this.stopping.delete(agentId));
      this.stopping.set(agentId, run);
      return run;
    }
    const t = this.agents.get(agentId);
    if (!t) return Promise.resolve();
    this.log.info({ agentId, reason: ctx.reason, pid: t.pgid }, 'stopping agent process');
    const run = this.teardown(agentId, t).finally(() => this.stopping.delete(agentId));
    this.stopping.set(agentId, run);
    return run;
  }

  private async teardown(agentId: string, t: Tracked): Promise<void> {
    t.destroying = true;
    t.agent.state = 'destroying';
    this.agents.delete(agentId);
    // The group, then whatever left it (setsid, double fork) but still carries the agent's id.
    if (t.pgid !== undefined) await stopAgentTree(agentId, t.pgid, this.opts.stopGraceMs, t.startTicks);
    // The cgroup (or scope) also holds a process that scrubbed its environment; removing it kills
    // them all.
    await this.limits.release(agentId).catch((err: unknown) => {
      this.log.warn({ agentId, err: (err as Error).message }, 'could not remove the agent cgroup');
    });
    // Last: whatever still runs as the agent's uid, then its home and uid (released for reuse).
    await unplace(agentId, t.placement, this.users).catch(this.placeLeft(agentId));
  }

  /** Limits are enforced only where the operator asked for it and this host has a way to. */
  get enforcesLimits(): boolean {
    return this.limits.enforced;
  }

  async adopt(agentId: string, labelSet: string[], backendRef: string | null): Promise<boolean> {
    if (this.opts.jobImage && (await this.opts.jobImage.adopt(agentId, labelSet))) return true;
    const pid = Number(backendRef) || (await findAgentPid(agentId)) || 0;
    if (!Number.isInteger(pid) || pid <= 0 || !groupAlive(pid)) return false;
    if (!processBelongsToAgent(pid, agentId)) return false;
    const agent: ManagedAgent = {
      id: agentId,
      labelSet,
      backendRef: String(pid),
      spawnedAt: Date.now(),
      state: 'running',
    };
    this.agents.set(agentId, {
      agent,
      pgid: pid,
      startTicks: startTicksOf(pid),
      registered: false,
      destroying: false,
      tail: [],
      placement: await this.recoveredPlacement(agentId),
    });
    return true;
  }

  async reapUnowned(agentId: string, backendRef: string | null): Promise<boolean> {
    if (this.agents.has(agentId) || this.opts.jobImage?.has(agentId)) return false;
    // Job-image agents: this scaler's containers labelled with the id (host-local evidence).
    if (this.opts.jobImage && (await this.opts.jobImage.reap(agentId))) return true;
    const pid = Number(backendRef) || (await findAgentPid(agentId)) || 0;
    const agentAlive =
      Number.isInteger(pid) && pid > 0 && groupAlive(pid) && processBelongsToAgent(pid, agentId);
    // Even with the agent gone, daemons its jobs started may still run: they carry its id.
    await stopAgentTree(
      agentId,
      agentAlive ? pid : undefined,
      this.opts.stopGraceMs,
      agentAlive ? startTicksOf(pid) : undefined,
    );
    // The uid claim names the agent: its processes and home go too, and the uid is free again.
    const placement = await this.recoveredPlacement(agentId);
    await unplace(agentId, placement, this.users).catch(this.placeLeft(agentId));
    if (!agentAlive && !placement.workDir) return false;
    await this.limits.release(agentId).catch(this.cgroupLeft(agentId));
    return true;
  }

  private recoveredPlacement(agentId: string): Promise<Placement> {
    return recoveredPlacement(this.users, agentId);
  }

  private placeLeft(agentId: string) {
    return swallow(this.log, 'scaler.bare-metal.unplace', { agentId });
  }

  /** Agent processes a dead orchestrator left behind for this scaler (see orphans.ts for the evidence). */
  async cleanupOrphans(
    isRegistered: (agentId: string) => boolean,
    opts: CleanupOrphansOptions = {},
  ): Promise<number> {
    // At start-up another orchestrator on this host may be restarting and about to re-adopt its
    // agents, which look exactly like ours: only an operator's explicit sweep takes them.
    if (!opts.requested) return 0;
    const orphans = await findOrphanAgents(this.name, (id) => this.agents.has(id), isRegistered);
    for (const o of orphans) opts.onItem?.({ agentId: o.agentId, ref: o.ref, reason: o.reason });
    if (opts.dryRun) return orphans.length;
    await Promise.all(orphans.map((o) => this.reapUnowned(o.agentId, o.ref)));
    return orphans.length;
  }

  /**
   * This scaler's agent processes that this orchestrator launched or that no orchestrator owns any
   * more (re-parented to init); one whose launcher is another live process is someone else's.
   */
  async inventory(): Promise<InventoryItem[]> {
    const procs = await listAgentProcesses(this.name);
    return procs
      .filter(
        (p) =>
          p.ppid === process.pid ||
          p.ppid === this.opts.spawner?.pid ||
          p.ppid === 1 ||
          this.agents.get(p.agentId)?.pgid === p.pid,
      )
      .map((p) => ({ kind: 'process' as const, agentId: p.agentId, ref: String(p.pid) }));
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
    this.plan = this.confinementFor(entry);
    for (const w of constructionWarnings(entry, this.plan, false)) this.log.warn(w);
  }

  /** Orchestrator lifetime: host processes do not outlive the orchestrator that started them. */
  async shutdownAll(): Promise<void> {
    await Promise.allSettled([...this.agents.keys()].map((id) => this.destroy(id, { reason: 'shutdown' })));
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
    const t = this.agents.get(agentId);
    if (!t) return undefined;
    return { backendType: 'bare-metal', scalerName: this.name, pid: t.pgid };
  }
}
