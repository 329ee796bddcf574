import type { FreeAgents } from '../scaler/core/plan.js';
import type { ConnectedAgent } from './connected-agent.js';
import { IdleIndex } from './idle-index.js';
import type { QueuedJob } from './job-queue.js';

export { newConnectedAgent, type ConnectedAgent } from './connected-agent.js';

/** A static agent whose connection dropped: listed as `disconnected` while it may still come back. */
export interface DepartedAgent {
  agent: ConnectedAgent;
  goneAtMs: number;
  /** The job it was running: it waits for the agent through the grace period. */
  jobId: string | undefined;
}

export type AgentState = 'idle' | 'busy' | 'draining' | 'disconnected';

/** Reported by an agent that finds a Docker socket on its own host. */
export const KICI_RUNTIME_DOCKER_LABEL = 'kici:runtime:docker';
/** Reported by an agent that finds a Podman socket on its own host. */
export const KICI_RUNTIME_PODMAN_LABEL = 'kici:runtime:podman';
export const RUNTIME_LABELS = [KICI_RUNTIME_DOCKER_LABEL, KICI_RUNTIME_PODMAN_LABEL];
/** Reported by an agent injected into a job's own image. */
export const JOB_IMAGE_LABEL = 'kici:runtime:job-image';
/** Our agents report their runtimes from this version on; an older or unversioned one is not gated. */
export const RUNTIME_FACTS_SINCE = '0.1.0';

function versionAtLeast(version: string | undefined, min: string): boolean {
  if (!version) return false;
  const parse = (v: string) => v.replace(/^v/, '').split(/[-+]/)[0]!.split('.').map(Number);
  const a = parse(version);
  const b = parse(min);
  if (a.some(Number.isNaN)) return false;
  for (let i = 0; i < 3; i++) if ((a[i] ?? 0) !== (b[i] ?? 0)) return (a[i] ?? 0) > (b[i] ?? 0);
  return true;
}

/**
 * Which agent may take a container job, or any job at all. An agent started for this very job takes
 * it (it runs inside the job's container, or was made for it). An agent inside another job's image
 * takes nothing else. A `container:` job needs a runtime label, but only where its absence proves
 * something: the agent is scaler-managed or a versioned agent of ours that reports runtimes. An
 * older operator agent is not gated; it fails such a job with a message naming the runtime it
 * lacks.
 */
function containerFit(
  agent: Pick<ConnectedAgent, 'labels'> & Partial<Pick<ConnectedAgent, 'kind' | 'version' | 'boundJobId'>>,
  job: Pick<QueuedJob, 'spec'> & Partial<Pick<QueuedJob, 'id'>>,
): boolean {
  if (agent.boundJobId !== undefined && agent.boundJobId === job.id) return true;
  if (agent.labels.has(JOB_IMAGE_LABEL)) return false;
  if (!job.spec.container || RUNTIME_LABELS.some((l) => agent.labels.has(l))) return true;
  const proof = agent.kind === 'scaler' || versionAtLeast(agent.version, RUNTIME_FACTS_SINCE);
  return !proof;
}

/**
 * Can this agent run this job? Labels ⊇ runsOn, the agent's gate ⊆ runsOn, and a container job
 * needs an agent that reports a container runtime.
 */
export function canAgentRunJob(
  agent: Pick<ConnectedAgent, 'labels' | 'gate'> &
    Partial<Pick<ConnectedAgent, 'kind' | 'version' | 'boundJobId'>>,
  job: Pick<QueuedJob, 'runsOn' | 'spec'> & Partial<Pick<QueuedJob, 'id'>>,
): boolean {
  for (const l of job.runsOn) if (!agent.labels.has(l)) return false;
  for (const g of agent.gate) if (!job.runsOn.includes(g)) return false;
  const role = job.spec.role;
  if (role === 'build' && !agent.labels.has('kici:role:builder') && agent.labels.has('kici:role:execution'))
    return false;
  if (
    role === 'init' &&
    !agent.labels.has('kici:role:init-runner') &&
    agent.labels.has('kici:role:execution')
  )
    return false;
  if (!containerFit(agent, job)) return false;
  if (job.spec.excludeLabels?.some((l) => agent.labels.has(l.trim().toLowerCase()))) return false;
  return true;
}

export class AgentRegistry {
  private readonly agents = new Map<string, ConnectedAgent>();
  /**
   * Agents an operator drained (`kici-admin agent drain`). Kept apart from `draining`, which the agent
   * itself (SIGTERM) or a warm pool set, so that `resume` lifts only the operator's hold. Keyed by
   * id, so the hold survives a reconnect.
   */
  private readonly held = new Set<string>();
  private readonly departed = new Map<string, DepartedAgent>();
  /** The same agents arranged for dispatch; only `add` and `remove` change it. */
  private readonly index = new IdleIndex<ConnectedAgent>();

  get size(): number {
    return this.agents.size;
  }

  get(id: string): ConnectedAgent | undefined {
    return this.agents.get(id);
  }

  add(agent: ConnectedAgent): void {
    this.index.join(agent, this.agents.get(agent.id));
    this.agents.set(agent.id, agent);
    this.departed.delete(agent.id);
  }

  /** With `goneAtMs`, a static agent is remembered as departed (it may reconnect within the grace). */
  remove(id: string, agent?: ConnectedAgent, goneAtMs?: number): void {
    if (!agent || this.agents.get(id) === agent) {
      const a = this.agents.get(id);
      this.agents.delete(id);
      if (a) this.index.leave(a);
      if (a && goneAtMs !== undefined && a.kind === 'static' && !a.revoked)
        this.departed.set(id, { agent: a, goneAtMs, jobId: a.busyJobId });
      // A scaler agent never returns under the same id: its hold would only linger.
      if (a?.kind === 'scaler') this.held.delete(id);
    }
  }

  /** Static agents that dropped less than `graceMs` ago and have not come back; older ones are forgotten. */
  departedWithin(nowMs: number, graceMs: number): DepartedAgent[] {
    for (const [id, d] of this.departed) if (nowMs - d.goneAtMs >= graceMs) this.departed.delete(id);
    return [...this.departed.values()];
  }

  forgetDeparted(id: string): void {
    this.departed.delete(id);
  }

  /** Operator drain: the agent finishes its job and is offered no other until resumed. */
  hold(id: string): void {
    this.held.add(id);
  }

  /** Lift an operator drain. False when there was none (an agent draining itself stays draining). */
  release(id: string): boolean {
    return this.held.delete(id);
  }

  isHeld(id: string): boolean {
    return this.held.has(id);
  }

  /**
   * A warm pool takes back an idle agent: drained, it is offered no job while it is torn down.
   * False when it is unknown or not free, so a pool never reclaims an agent that just took work.
   */
  drainIfIdle(id: string): boolean {
    const a = this.agents.get(id);
    if (!a || !this.isAvailable(a)) return false;
    a.drain();
    return true;
  }

  isAvailable(a: ConnectedAgent): boolean {
    return !a.busyJobId && !a.draining && !this.held.has(a.id) && !(a.ephemeral && a.jobsTaken > 0);
  }

  stateOf(a: ConnectedAgent): AgentState {
    if (a.draining || this.held.has(a.id) || (a.ephemeral && a.jobsTaken > 0 && !a.busyJobId))
      return 'draining';
    return a.busyJobId ? 'busy' : 'idle';
  }

  /** Agents free for work, static ones first: they are already paid for, a scaler agent is not. */
  idle(): ConnectedAgent[] {
    const out: ConnectedAgent[] = [];
    for (const a of this.agents.values()) if (this.isAvailable(a)) out.push(a);
    return out.sort((a, b) => Number(a.kind !== 'static') - Number(b.kind !== 'static'));
  }

  /**
   * The same agents as `idle()`, in the same order, for one planning pass, without listing them:
   * a pass picks through the index (each pick costs the shapes of agent, not the fleet).
   */
  free(): FreeAgents<ConnectedAgent> {
    return this.index.free((a) => this.isAvailable(a));
  }

  /** Is any agent free for work? Stops at the first. */
  anyIdle(): boolean {
    return this.index.anyFree((a) => this.isAvailable(a));
  }

  /** Any connected agent, busy or not, that could ever run the job (a used single-use agent never will). */
  anyCould(
    job: Pick<QueuedJob, 'runsOn' | 'spec'>,
    fits: (a: ConnectedAgent) => boolean = () => true,
  ): boolean {
    for (const a of this.agents.values()) {
      if (!a.draining && !(a.ephemeral && a.jobsTaken > 0) && canAgentRunJob(a, job) && fits(a)) return true;
    }
    return false;
  }

  idleCount(): number {
    let n = 0;
    for (const a of this.agents.values()) if (this.isAvailable(a)) n++;
    return n;
  }

  list(): ConnectedAgent[] {
    return [...this.agents.values()];
  }
}
