import type { OrchestratorMessage } from '../protocol/messages.js';
import type { QueuedJob } from './job-queue.js';

export interface ConnectedAgent {
  id: string;
  kind: 'static' | 'scaler';
  labels: ReadonlySet<string>;
  labelList: string[];
  /** Labels a job must carry to run here (mandatoryLabels and platform taints). */
  gate: string[];
  scalerName?: string;
  /** Single-use agents take exactly one job. */
  ephemeral: boolean;
  jobsTaken: number;
  busyJobId?: string;
  draining: boolean;
  connectedAtMs: number;
  lastSeenMs: number;
  /** Set when the orchestrator closes the socket for a reason the scaler should learn (destroy reason). */
  closedFor?: 'heartbeat-timeout';
  send(msg: OrchestratorMessage): void;
  close(code: number, reason: string): void;
}

/** One registered connection. The socket handler and test harnesses build agents the same way. */
export function newConnectedAgent(a: {
  id: string;
  labels: string[];
  /** The scaler's registration answer; null for a static agent. */
  scaled: { gate: string[]; scalerName: string } | null;
  /** Jobs the agent reports it already finished (a reconnecting single-use agent takes no other). */
  jobsDone?: number | undefined;
  nowMs: number;
  send: ConnectedAgent['send'];
  close: ConnectedAgent['close'];
}): ConnectedAgent {
  return {
    id: a.id,
    kind: a.scaled ? 'scaler' : 'static',
    labels: new Set(a.labels),
    labelList: a.labels,
    gate: a.scaled?.gate ?? [],
    ...(a.scaled ? { scalerName: a.scaled.scalerName } : {}),
    ephemeral: a.scaled !== null,
    jobsTaken: a.jobsDone ?? 0,
    draining: false,
    connectedAtMs: a.nowMs,
    lastSeenMs: a.nowMs,
    send: a.send,
    close: a.close,
  };
}

export const RUNTIME_LABELS = ['kici:runtime:docker', 'kici:runtime:podman'];

/**
 * Can this agent run this job? Labels ⊇ runsOn, the agent's gate ⊆ runsOn, and a container job
 * needs an agent that reports a container runtime.
 */
export function canAgentRunJob(
  agent: Pick<ConnectedAgent, 'labels' | 'gate'>,
  job: Pick<QueuedJob, 'runsOn' | 'spec'>,
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
  if (job.spec.container && !RUNTIME_LABELS.some((l) => agent.labels.has(l))) return false;
  if (job.spec.excludeLabels?.some((l) => agent.labels.has(l.trim().toLowerCase()))) return false;
  return true;
}

export class AgentRegistry {
  private readonly agents = new Map<string, ConnectedAgent>();

  get size(): number {
    return this.agents.size;
  }

  get(id: string): ConnectedAgent | undefined {
    return this.agents.get(id);
  }

  add(agent: ConnectedAgent): void {
    this.agents.set(agent.id, agent);
  }

  remove(id: string, agent?: ConnectedAgent): void {
    if (!agent || this.agents.get(id) === agent) this.agents.delete(id);
  }

  isAvailable(a: ConnectedAgent): boolean {
    return !a.busyJobId && !a.draining && !(a.ephemeral && a.jobsTaken > 0);
  }

  /** Agents free for work, static ones first: they are already paid for, a scaler agent is not. */
  idle(): ConnectedAgent[] {
    const out: ConnectedAgent[] = [];
    for (const a of this.agents.values()) if (this.isAvailable(a)) out.push(a);
    return out.sort((a, b) => Number(a.kind !== 'static') - Number(b.kind !== 'static'));
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
