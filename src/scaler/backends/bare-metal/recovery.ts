/**
 * Agents this backend finds on the host but does not hold: an earlier orchestrator's, or one whose
 * teardown was cut short. They are adopted again, reaped, swept as orphans and listed, each from
 * host-local evidence only (the process's environment, the uid claim, the containers' labels).
 */
import { startTicksOf } from '../../../util/proc-tree.js';
import type { CleanupOrphansOptions, InventoryItem, ManagedAgent } from '../../types.js';
import type { JobImageAgents } from './job-image.js';
import { findOrphanAgents, listAgentProcesses } from './orphans.js';
import { recoveredPlacement, unplace } from './placement.js';
import { findAgentPid, groupAlive, processBelongsToAgent, stopAgentTree } from './process-group.js';
import { OutputTail } from './process-output.js';
import type { ProcessParts, Tracked } from './process-agents.js';

/** What recovery may ask of the backend's own agent processes, and the one thing it may hand it. */
export interface HeldAgents {
  /** The backend holds this agent's process: from the start of its spawn until its teardown begins. */
  holds(agentId: string): boolean;
  /** The process group of an agent the backend holds. */
  pgidOf(agentId: string): number | undefined;
  /** Hold again an agent process that outlived the orchestrator that started it. */
  hold(agentId: string, t: Tracked): void;
}

export interface RecoveryDeps extends ProcessParts {
  readonly jobImage: JobImageAgents | undefined;
  /** The spawner's pid while it runs: the agents it started are this orchestrator's. */
  spawnerPid(): number | undefined;
}

export class AgentRecovery {
  constructor(
    private readonly held: HeldAgents,
    private readonly deps: RecoveryDeps,
  ) {}

  async adopt(agentId: string, labelSet: string[], backendRef: string | null): Promise<boolean> {
    const { jobImage } = this.deps;
    if (jobImage && (await jobImage.adopt(agentId, labelSet))) return true;
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
    this.held.hold(agentId, {
      agent,
      pgid: pid,
      startTicks: startTicksOf(pid),
      registered: false,
      destroying: false,
      tail: new OutputTail(),
      placement: await recoveredPlacement(this.deps.users, agentId),
    });
    return true;
  }

  async reapUnowned(agentId: string, backendRef: string | null): Promise<boolean> {
    const { jobImage, users } = this.deps;
    if (this.held.holds(agentId) || jobImage?.has(agentId)) return false;
    // Job-image agents: this scaler's containers labelled with the id (host-local evidence).
    if (jobImage && (await jobImage.reap(agentId))) return true;
    const pid = Number(backendRef) || (await findAgentPid(agentId)) || 0;
    const agentAlive =
      Number.isInteger(pid) && pid > 0 && groupAlive(pid) && processBelongsToAgent(pid, agentId);
    // Even with the agent gone, daemons its jobs started may still run: they carry its id.
    await stopAgentTree(
      agentId,
      agentAlive ? pid : undefined,
      this.deps.stopGraceMs,
      agentAlive ? startTicksOf(pid) : undefined,
    );
    // The uid claim names the agent: its processes and home go too, and the uid is free again.
    const placement = await recoveredPlacement(users, agentId);
    await unplace(agentId, placement, users).catch(this.deps.placeLeft(agentId));
    if (!agentAlive && !placement.workDir) return false;
    await this.deps.limits.release(agentId).catch(this.deps.cgroupLeft(agentId));
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
    const orphans = await findOrphanAgents(this.deps.scaler, (id) => this.held.holds(id), isRegistered);
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
    const procs = await listAgentProcesses(this.deps.scaler);
    return procs
      .filter(
        (p) =>
          p.ppid === process.pid ||
          p.ppid === this.deps.spawnerPid() ||
          p.ppid === 1 ||
          this.held.pgidOf(p.agentId) === p.pid,
      )
      .map((p) => ({ kind: 'process' as const, agentId: p.agentId, ref: String(p.pid) }));
  }
}
