import type { Logger } from '../../../util/logger.js';
import { atOnce } from '../../registration.js';
import type { DestroyContext, LaterWork, LogCapture, ManagedAgent } from '../../types.js';
import { logCaptureOf } from '../log-capture.js';
import type { AgentLimits } from './agent-limits.js';
import { unplace, type Placement } from './placement.js';
import { stopAgentTree } from './process-group.js';
import type { OutputTail } from './process-output.js';
import type { AgentChild } from './spawner/agent-child.js';
import type { AgentUserPool } from './users.js';

/**
 * One agent process the backend holds, from its spawn (or adoption) to its teardown. The spawn
 * fills in its process as it starts; teardown marks it destroying, which a spawn still under way
 * sees and abandons its start.
 */
export interface Tracked {
  agent: ManagedAgent;
  child?: AgentChild;
  pgid?: number;
  /** The agent process's start time (/proc clock ticks), where it could be read: narrows teardown's scan. */
  startTicks?: number | undefined;
  registered: boolean;
  destroying: boolean;
  tail: OutputTail;
  placement: Placement;
}

/** What starting, stopping and reclaiming agent processes share, handed over by the backend. */
export interface ProcessParts {
  readonly scaler: string;
  readonly log: Logger;
  readonly users: AgentUserPool;
  /** How this scaler's limits are applied (a no-op when they are not enforced). */
  readonly limits: AgentLimits;
  /** Grace between SIGTERM and SIGKILL when an agent is stopped. */
  readonly stopGraceMs: number | undefined;
  /** Where a failed clean-up is logged and counted. */
  placeLeft(agentId: string): (err: unknown) => void;
  cgroupLeft(agentId: string): (err: unknown) => void;
}

/** The agent processes one bare-metal scaler holds (its job-image containers are JobImageAgents'). */
export class ProcessAgents {
  private readonly agents = new Map<string, Tracked>();

  constructor(private readonly parts: ProcessParts) {}

  get size(): number {
    return this.agents.size;
  }

  /** Held from the start of its spawn until its teardown begins (or its start fails). */
  holds(agentId: string): boolean {
    return this.agents.has(agentId);
  }

  pgidOf(agentId: string): number | undefined {
    return this.agents.get(agentId)?.pgid;
  }

  ids(): string[] {
    return [...this.agents.keys()];
  }

  /** Hold a spawn's record before its process exists (a destroy racing the start finds it), or an adopted one's. */
  hold(agentId: string, t: Tracked): void {
    this.agents.set(agentId, t);
  }

  /** Let go of a spawn that failed or was abandoned: its own path undoes what it made. */
  drop(agentId: string): void {
    this.agents.delete(agentId);
  }

  logCapture(agentId: string): LogCapture | undefined {
    const t = this.agents.get(agentId);
    return t ? logCaptureOf(t.tail) : undefined;
  }

  markRegistered(agentId: string, later: LaterWork = atOnce): void {
    const t = this.agents.get(agentId);
    if (!t) return;
    t.registered = true;
    // Its start is over: the next agent's uid and home are claimed off that agent's start. Not at
    // the registration itself: the claim reads every process's status synchronously (about 1 ms on
    // an idle host, several on a busy one) and would sit between the agent's hello and its job.
    if (t.placement.user) later(() => this.parts.users.prepareSpare());
  }

  /** Start tearing the agent down; undefined when it is not held (never was, or already going). */
  stop(agentId: string, reason: DestroyContext['reason']): Promise<void> | undefined {
    const t = this.agents.get(agentId);
    if (!t) return undefined;
    this.parts.log.info({ agentId, reason, pid: t.pgid }, 'stopping agent process');
    return this.teardown(agentId, t);
  }

  private async teardown(agentId: string, t: Tracked): Promise<void> {
    const { limits, users } = this.parts;
    t.destroying = true;
    t.agent.state = 'destroying';
    this.agents.delete(agentId);
    // The group, then whatever left it (setsid, double fork) but still carries the agent's id.
    if (t.pgid !== undefined) await stopAgentTree(agentId, t.pgid, this.parts.stopGraceMs, t.startTicks);
    // The cgroup (or scope) also holds a process that scrubbed its environment; removing it kills
    // them all.
    await limits.release(agentId).catch((err: unknown) => {
      this.parts.log.warn({ agentId, err: (err as Error).message }, 'could not remove the agent cgroup');
    });
    // Last: whatever still runs as the agent's uid, then its home and uid (released for reuse).
    await unplace(agentId, t.placement, users).catch(this.parts.placeLeft(agentId));
  }
}
