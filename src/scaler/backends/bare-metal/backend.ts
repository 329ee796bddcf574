import { spawn, type ChildProcess } from 'node:child_process';
import { access, constants, stat } from 'node:fs/promises';
import { isAbsolute, resolve } from 'node:path';
import { normalizeLabelSet, type LabelSetConfig, type ScalerEntry } from '../../../config/index.js';
import { checkLabelSets } from '../../core/label-set-check.js';
import type { Logger } from '../../../util/logger.js';
import { swallow } from '../../../util/swallowed-errors.js';
import { DeterministicSpawnError, SpawnError } from '../../core/spawn-errors.js';
import type {
  BackendCapabilities,
  CleanupOrphansOptions,
  DestroyContext,
  LogCapture,
  ManagedAgent,
  RequiredTool,
  ScalerBackend,
  SpawnContext as SpawnRequest,
  ValidationResult,
} from '../../types.js';
import { onLines } from '../../../util/lines.js';
import { launchError } from './launch-error.js';
import { bareMetalTools } from './tools.js';
import { buildAgentEnv } from './env.js';
import { joinCgroupsCommand, type CgroupDriver } from './cgroups.js';
import { findOrphanAgents } from './orphans.js';
import { findAgentPid, groupAlive, processBelongsToAgent, stopAgentTree } from './process-group.js';

export interface BareMetalBackendOptions {
  entry: ScalerEntry;
  logger: Logger;
  /** Relative `binaryPath`s are resolved against this directory (the config file's). */
  baseDir: string;
  hostEnv?: NodeJS.ProcessEnv;
  /** Grace between SIGTERM and SIGKILL on destroy. */
  stopGraceMs?: number;
  /** Cgroup driver for `enforceCgroups: true` (injected; see detectCgroups). */
  cgroups?: CgroupDriver | undefined;
}

interface Tracked {
  agent: ManagedAgent;
  child?: ChildProcess;
  pgid?: number;
  registered: boolean;
  destroying: boolean;
  tail: string[];
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
    this.log.warn(
      "bare-metal agents run as host processes with the orchestrator user's filesystem and network access; use containers or micro-VMs for untrusted builds",
    );
  }

  getActiveCount(): number {
    return this.agents.size;
  }

  binaryPathFor(ls: LabelSetConfig): string | undefined {
    if (!ls.binaryPath) return undefined;
    return isAbsolute(ls.binaryPath) ? ls.binaryPath : resolve(this.opts.baseDir, ls.binaryPath);
  }

  getRequiredTools(entry: ScalerEntry): RequiredTool[] {
    return bareMetalTools(entry, this.opts.baseDir);
  }

  getLogCapture(agentId: string): LogCapture | undefined {
    const t = this.agents.get(agentId);
    return t ? { tail: (n = TAIL_LINES) => t.tail.slice(-n) } : undefined;
  }

  async spawn(req: SpawnRequest): Promise<ManagedAgent> {
    const key = normalizeLabelSet(req.labelSet);
    const ls = this.entry.labelSets.find((l) => normalizeLabelSet(l.labels) === key);
    if (!ls)
      throw new SpawnError('config', `label set [${key}] is not served by bare-metal scaler "${this.name}"`);
    if (this.agents.size >= this.entry.maxAgents) {
      throw new SpawnError(
        'capacity',
        `bare-metal scaler "${this.name}" is at capacity (${this.agents.size}/${this.entry.maxAgents})`,
      );
    }
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
    const tracked: Tracked = { agent, registered: false, destroying: false, tail: [] };
    this.agents.set(req.agentId, tracked);
    req.onEvent('scaler.provisioning', 'spawning agent process');
    const { env, trusted } = buildAgentEnv(this.opts.hostEnv ?? process.env, ls, {
      orchestratorUrl: req.orchestratorUrl,
      agentId: req.agentId,
      token: req.auth.token,
      fullLabels: req.fullLabels,
    });
    if (trusted)
      this.log.warn({ agentId: req.agentId }, 'agent started with the trusted environment profile');

    let launch = { file: binary, args: [] as string[] };
    if (this.enforcesLimits) {
      try {
        launch = joinCgroupsCommand(await this.opts.cgroups!.create(req.agentId, req.limits), binary);
      } catch (err) {
        this.agents.delete(req.agentId);
        await this.opts.cgroups!.remove(req.agentId).catch(this.cgroupLeft(req.agentId));
        const message = `cannot create the agent's cgroup for enforceCgroups: ${(err as Error).message}`;
        req.onEvent('scaler.failed', message);
        throw new DeterministicSpawnError('config', message, { cause: err });
      }
    }
    let child: ChildProcess;
    try {
      // Checked here, not left to the cgroup shell or to exec, so the reason names what is wrong.
      if ((await stat(binary)).isDirectory())
        throw Object.assign(new Error('is a directory'), { code: 'EISDIR' });
      if (launch.file !== binary) await access(binary, constants.X_OK);
      child = spawn(launch.file, launch.args, { detached: true, stdio: ['ignore', 'pipe', 'pipe'], env });
      await new Promise<void>((ok, fail) => {
        child.once('spawn', ok);
        child.once('error', fail);
      });
    } catch (err) {
      this.agents.delete(req.agentId);
      if (this.enforcesLimits)
        await this.opts.cgroups!.remove(req.agentId).catch(this.cgroupLeft(req.agentId));
      const failure = launchError(binary, err);
      req.onEvent('scaler.failed', failure.message);
      throw failure;
    }
    child.unref();
    const pid = child.pid!;
    tracked.child = child;
    tracked.pgid = pid;
    agent.backendRef = String(pid);
    agent.state = 'running';
    this.capture(tracked, child, req.onEvent);
    // 'close' comes after the output streams ended, so the failure message carries the whole tail.
    child.once('close', (code, signal) => this.onExit(req, tracked, code, signal));
    if (req.signal.aborted || tracked.destroying) {
      // Abandoned (deadline, or destroy() ran before the process existed) while starting: it must not outlive that.
      this.agents.delete(req.agentId);
      await stopAgentTree(req.agentId, pid, this.opts.stopGraceMs);
      if (this.enforcesLimits)
        await this.opts.cgroups!.remove(req.agentId).catch(this.cgroupLeft(req.agentId));
      throw new SpawnError('spawn-timeout', 'spawn aborted');
    }
    req.onEvent('scaler.ready', `agent process started (PID ${pid})`);
    req.onEvent('agent.connecting', 'waiting for the agent to register');
    return agent;
  }

  /** The agent's own output goes to our log at info and, as system lines, to its bound job's log. */
  private capture(t: Tracked, child: ChildProcess, onEvent: SpawnRequest['onEvent']): void {
    const log = this.log.child({ agentId: t.agent.id, logsSource: 'bare-metal' });
    for (const [name, stream] of [
      ['stdout', child.stdout],
      ['stderr', child.stderr],
    ] as const) {
      onLines(stream, (line) => {
        t.tail.push(line);
        if (t.tail.length > TAIL_LINES) t.tail.shift();
        log.info({ stream: name, line }, 'agent output');
        onEvent('agent.output', `[${name}] ${line}`);
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
    const t = this.agents.get(agentId);
    if (t) t.registered = true;
  }

  destroy(agentId: string, ctx: DestroyContext): Promise<void> {
    const under = this.stopping.get(agentId);
    if (under) return under;
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
    if (t.pgid !== undefined) await stopAgentTree(agentId, t.pgid, this.opts.stopGraceMs);
    // The cgroup also holds a process that scrubbed its environment; removing it kills them all.
    if (this.enforcesLimits) {
      await this.opts.cgroups!.remove(agentId).catch((err: unknown) => {
        this.log.warn({ agentId, err: (err as Error).message }, 'could not remove the agent cgroup');
      });
    }
  }

  /** Limits are enforced only where the operator asked for it and a cgroup tree is usable. */
  get enforcesLimits(): boolean {
    return this.opts.entry.enforceCgroups === true && this.opts.cgroups !== undefined;
  }

  async adopt(agentId: string, labelSet: string[], backendRef: string | null): Promise<boolean> {
    const pid = Number(backendRef) || (await findAgentPid(agentId)) || 0;
    if (!Number.isInteger(pid) || pid <= 0 || !groupAlive(pid)) return false;
    if (!(await processBelongsToAgent(pid, agentId))) return false;
    const agent: ManagedAgent = {
      id: agentId,
      labelSet,
      backendRef: String(pid),
      spawnedAt: Date.now(),
      state: 'running',
    };
    this.agents.set(agentId, { agent, pgid: pid, registered: false, destroying: false, tail: [] });
    return true;
  }

  async reapUnowned(agentId: string, backendRef: string | null): Promise<boolean> {
    if (this.agents.has(agentId)) return false;
    const pid = Number(backendRef) || (await findAgentPid(agentId)) || 0;
    const agentAlive =
      Number.isInteger(pid) && pid > 0 && groupAlive(pid) && (await processBelongsToAgent(pid, agentId));
    // Even with the agent gone, daemons its jobs started may still run: they carry its id.
    await stopAgentTree(agentId, agentAlive ? pid : undefined, this.opts.stopGraceMs);
    if (!agentAlive) return false;
    if (this.enforcesLimits) await this.opts.cgroups!.remove(agentId).catch(this.cgroupLeft(agentId));
    return true;
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

  /** A cgroup that could not be removed is left behind (empty or not): logged and counted. */
  private cgroupLeft(agentId: string) {
    return swallow(this.log, 'scaler.bare-metal.cgroup-remove', { agentId });
  }

  checkReload(entry: ScalerEntry): ValidationResult {
    const errors = [
      ...checkLabelSets(entry.labelSets),
      ...entry.labelSets.flatMap((ls, i) =>
        ls.binaryPath || ls.image ? [] : [`labelSets[${i}]: bare-metal label sets need binaryPath or image`],
      ),
    ];
    if (entry.type !== this.type)
      errors.push(`type: a ${this.type} backend cannot take a ${entry.type} entry`);
    return errors.length ? { valid: false, errors } : { valid: true };
  }

  applyReload(entry: ScalerEntry): void {
    this.entry = entry;
  }

  /** Orchestrator lifetime: host processes do not outlive the orchestrator that started them. */
  async shutdownAll(): Promise<void> {
    await Promise.allSettled([...this.agents.keys()].map((id) => this.destroy(id, { reason: 'shutdown' })));
  }

  getScalerContext(agentId: string): Record<string, unknown> | undefined {
    const t = this.agents.get(agentId);
    if (!t) return undefined;
    return { backendType: 'bare-metal', scalerName: this.name, pid: t.pgid };
  }
}
