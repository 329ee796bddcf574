import { monoNow, type Clock, type TimerHandle } from '../util/clock.js';
import type { Logger } from '../util/logger.js';

/**
 * Agents the scaler counted as registered whose registration then failed on the server's side (a
 * store write threw): the server closed the connection and asked the agent to dial again. Nothing
 * else would ever end such an entry: it has no connection whose close tears it down, and a
 * registered entry has no spawn deadline. So each gets a grace to come back; one that does not is
 * ended as any disconnect of a registered agent is. One that does gets the job its failed
 * registration had been handed, which waited for it meanwhile.
 */
export interface ReturnWatchHost {
  readonly opts: { readonly clock: Clock };
  readonly log: Logger;
  /** A job bound to an agent is waiting on it: no other is spawned for the job meanwhile. */
  readonly state: {
    bindJob(jobId: string, agentId: string): void;
    releaseJob(jobId: string, agentId: string): void;
  };
  /** The one way a registered agent that lost its connection is ended. */
  onAgentDisconnected(agentId: string): Promise<void>;
  noteSwallowed(site: string, err: unknown, context?: Record<string, unknown>): void;
}

interface Expected {
  /** On the monotonic clock: a retry that fails again does not move it. */
  readonly deadline: number;
  boundJobId: string | undefined;
  timer: TimerHandle | undefined;
}

export class ReturnWatch {
  private readonly waiting = new Map<string, Expected>();

  constructor(private readonly host: ReturnWatchHost) {}

  /** The agent's registration failed after the scaler counted it: it has `graceMs` to be back. */
  expect(agentId: string, boundJobId: string | undefined, graceMs: number): void {
    const w = this.waiting.get(agentId) ?? {
      deadline: monoNow(this.host.opts.clock) + graceMs,
      boundJobId: undefined,
      timer: undefined,
    };
    this.waiting.set(agentId, w);
    this.wait(agentId, w, boundJobId);
  }

  /**
   * The agent's retry failed in the scaler's own part, before the server got to count it (its
   * adoption threw or was refused): the server asks nothing of the scaler then, so the wait `back`
   * stopped resumes here, to the same deadline, with the job `back` gave out. An agent that was
   * ended meanwhile (a stop) is not waited for again.
   */
  retryFailed(agentId: string, boundJobId: string | undefined): void {
    const w = this.waiting.get(agentId);
    if (w) this.wait(agentId, w, boundJobId);
  }

  /**
   * The agent is registering again: its grace stops while that is under way (a failure there sets
   * it again, to the same deadline: `expect` or `retryFailed`). The job its failed registration was
   * handed, if any, is its. The record stays until the agent's end, so that a retry failing later
   * does not move the deadline either.
   */
  back(agentId: string): string | undefined {
    const w = this.waiting.get(agentId);
    if (!w) return undefined;
    w.timer?.cancel();
    w.timer = undefined;
    const job = w.boundJobId;
    w.boundJobId = undefined;
    if (job) this.host.state.releaseJob(job, agentId);
    return job;
  }

  /** The agent is gone (torn down, or its grace ran out): nothing of it is kept, the job's wait included. */
  drop(agentId: string): void {
    const w = this.waiting.get(agentId);
    if (!w) return;
    w.timer?.cancel();
    if (w.boundJobId) this.host.state.releaseJob(w.boundJobId, agentId);
    this.waiting.delete(agentId);
  }

  /** Whether anything of the agent is kept: waited for, or back with its deadline kept for a retry. */
  has(agentId: string): boolean {
    return this.waiting.has(agentId);
  }

  /** How many agents have something kept here. */
  get size(): number {
    return this.waiting.size;
  }

  /** (Re)arms the grace to the record's deadline, whenever it is asked, and holds the job for the agent. */
  private wait(agentId: string, w: Expected, boundJobId: string | undefined): void {
    w.timer?.cancel();
    w.boundJobId ??= boundJobId;
    if (w.boundJobId) this.host.state.bindJob(w.boundJobId, agentId);
    const left = w.deadline - monoNow(this.host.opts.clock);
    w.timer = this.host.opts.clock.setTimer(left, () => this.notBack(agentId));
  }

  private notBack(agentId: string): void {
    this.drop(agentId);
    this.host.log.warn({ agentId }, 'agent did not come back after its registration failed; tearing it down');
    this.host
      .onAgentDisconnected(agentId)
      .catch((e: unknown) => this.host.noteSwallowed('scaler.unreturned-teardown', e, { agentId }));
  }

  /** Stopping: no grace ends after this. */
  stop(): void {
    for (const id of [...this.waiting.keys()]) this.drop(id);
  }
}
