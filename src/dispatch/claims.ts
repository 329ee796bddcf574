import type { JobSpec } from '../jobs/run-spec.js';
import type { ScalerManager } from '../scaler/manager.js';
import type { Store } from '../store/index.js';
import type { GroupCommit, ResultRide } from '../store/group-commit.js';
import type { Clock } from '../util/clock.js';
import { errorMessage } from '../util/errors.js';
import type { Logger } from '../util/logger.js';
import { retryWrite } from '../util/retry-write.js';
import type { ActiveJob } from './active-job.js';
import type { ActiveJobs } from './active-jobs.js';
import { canAgentRunJob, type AgentRegistry, type ConnectedAgent } from './agent-registry.js';
import { ClaimAlternates, type Taken } from './claim-alternates.js';
import { planDispatch, toScaleJob } from './dispatch-plan.js';
import { JobQueue, type QueuedJob } from './job-queue.js';
import { toAssigned } from './job-rows.js';
import type { LogSink } from './log-sink.js';
import type { SealedEnv } from './sealed-env.js';
import { secretValues } from '../jobs/secret-mask.js';

export type { Taken } from './claim-alternates.js';

export interface ClaimsDeps {
  store: Store;
  writes: GroupCommit;
  queue: JobQueue;
  registry: AgentRegistry;
  active: ActiveJobs;
  scaler?: ScalerManager | undefined;
  clock: Clock;
  log: Logger;
  /** Several orchestrators on one database: claims are stamped with this instance. */
  instanceId?: string | undefined;
  /** Look for work again: a lost claim freed its agent, or an uncertain job is queued again. */
  pump: () => void;
  /** Stopping or draining: no new work is handed out. */
  halted: () => boolean;
  stopped: () => boolean;
  /** Values handed out with a job but never stored (sealed-env.ts). */
  sealed: SealedEnv;
  /** Masks each dispatched job's secrets in its log. */
  logs: LogSink;
}

/**
 * Turning a plan's assignments into stored claims and `job.assign` frames. The in-memory half
 * (the job off the queue, the agent busy) happens at once; the claim is one conditional statement
 * for many jobs, so a job another orchestrator claimed first is simply not sent; in a cluster the
 * agent takes one of the next queued jobs in the same statement instead (claim-alternates.ts).
 */
export class Claims {
  /** Jobs whose claim outcome is being checked after a store error (neither queued nor active). */
  private readonly uncertain = new Set<string>();
  /** Only in a cluster: alone, no one else claims, so a planned job is never lost. */
  private readonly alternates: ClaimAlternates | undefined;

  constructor(private readonly deps: ClaimsDeps) {
    if (deps.instanceId !== undefined)
      this.alternates = new ClaimAlternates({
        queue: deps.queue,
        canRun: (agent, job) => canAgentRunJob(agent, job) && this.fits(agent.id, job),
      });
  }

  private now(): Date {
    return new Date(this.deps.clock.now());
  }

  /** Neither queued nor active here while a claim's outcome is awaited or checked. */
  isPending(jobId: string): boolean {
    return this.uncertain.has(jobId) || !!this.alternates?.has(jobId);
  }

  /** Take a plan's assignments that still hold (the plan decided per group; state may have moved). */
  takeAssigned(
    assign: readonly { jobId: string; agentId: string }[],
    queue: Pick<JobQueue, 'get'> = this.deps.queue,
  ): Taken[] {
    const taken: Taken[] = [];
    for (const a of assign) {
      const job = queue.get(a.jobId);
      const agent = this.deps.registry.get(a.agentId);
      if (
        job &&
        agent &&
        this.deps.registry.isAvailable(agent) &&
        canAgentRunJob(agent, job) &&
        this.fits(agent.id, job)
      ) {
        this.take(job, agent);
        taken.push({ job, agent });
      }
    }
    return taken;
  }

  /**
   * The group commit is about to store results their agents reported: those agents are free once
   * it commits, so their next jobs are claimed in the same statement (one commit for a result and
   * the next claim, and no wait for a pass after the commit). An agent keeps its finished job as
   * its busy job until then, so nothing else offers it work; should the statement fail, the claims
   * are settled as uncertain and the agents wait for their results' retry, as before.
   */
  rideOnResults(finished: string[]): ResultRide | undefined {
    if (this.deps.halted() || !this.deps.queue.size) return undefined;
    const freed = new Map<ConnectedAgent, string>();
    for (const jobId of finished) {
      const a = this.deps.active.get(jobId);
      const agent = a?.reported ? this.deps.registry.get(a.agentId) : undefined;
      if (!agent?.freeFrom(jobId)) continue;
      if (this.deps.registry.isAvailable(agent)) freed.set(agent, jobId);
      else agent.holdResult(jobId);
    }
    if (!freed.size) return undefined;
    const taken: Taken[] = [];
    try {
      for (const d of planDispatch(
        this.deps.queue,
        [...freed.keys()],
        this.deps.scaler,
        this.deps.clock.now(),
      ).plan)
        taken.push(...this.takeAssigned(d.assign));
    } finally {
      // Not given work: it stays busy with its result until the commit, as without a ride.
      for (const [agent, jobId] of freed) if (agent.busyJobId === undefined) agent.holdResult(jobId);
    }
    if (!taken.length) return undefined;
    const alts = this.alternates?.reserve(taken) ?? [];
    return {
      claims: ClaimAlternates.requests(taken, alts),
      at: this.now(),
      owner: this.deps.instanceId,
      claimed: (won) => {
        const pairs = this.alternates ? this.alternates.settle(taken, alts, won) : taken;
        // After this turn's microtasks: the result's ack leaves before the next job's assignment.
        setImmediate(() => void this.sendWon(pairs, won));
      },
      failed: (err) => {
        this.alternates?.unsettled(taken, alts, (j, agentId) => this.settleUncertainClaim(j, agentId));
        for (const { job, agent } of taken) {
          this.deps.log.error(
            { err: errorMessage(err), jobId: job.id },
            'could not claim job; it stays queued',
          );
          this.settleUncertainClaim(job, agent.id);
          agent.untake(job.id);
          agent.holdResult(freed.get(agent)!); // its result is retried; it is free once that is stored
        }
      },
    };
  }

  /**
   * Jobs being submitted that idle agents take at once: their rows are stored already claimed, in
   * the submit's own commit, so a job's start waits for one commit instead of a commit, a dispatch
   * pass and a second commit. Only while nothing older is queued here (older jobs go first), and
   * by the same planner as a pass, so the choice is the one a pass would make.
   */
  takeNew(jobs: QueuedJob[]): Taken[] {
    if (this.deps.halted() || this.deps.queue.size || !jobs.length) return [];
    if (!this.deps.registry.anyIdle()) return [];
    const idle = this.deps.registry.free();
    const fresh = new JobQueue();
    for (const j of jobs) fresh.add(j);
    const taken: Taken[] = [];
    for (const d of planDispatch(fresh, idle, this.deps.scaler, this.deps.clock.now()).plan)
      taken.push(...this.takeAssigned(d.assign, fresh));
    return taken;
  }

  /** The submit that took these failed: their agents are free again. */
  untake(taken: Taken[]): void {
    for (const { job, agent } of taken) {
      agent.untake(job.id);
    }
    if (taken.length) this.deps.pump();
  }

  /** The submit's commit stored these jobs claimed (job → spec): send them to their agents. */
  sendNew(taken: Taken[], specs: Map<string, unknown>): Promise<boolean[]> {
    return this.sendWon(taken, specs);
  }

  fits(agentId: string, job: QueuedJob): boolean {
    const a = this.deps.registry.get(agentId);
    return (
      !a || a.kind !== 'scaler' || !this.deps.scaler || this.deps.scaler.agentFits(agentId, toScaleJob(job))
    );
  }

  /** Hand one queued job (or, in a cluster, the next one still queued) to one agent. False when it got none. */
  async assign(job: QueuedJob, agent: ConnectedAgent): Promise<boolean> {
    this.take(job, agent);
    return (await this.claim([{ job, agent }]))[0]!;
  }

  /** The in-memory half of an assignment, done at once so the rest of a pass sees the agent busy. */
  private take(job: QueuedJob, agent: ConnectedAgent): void {
    this.deps.queue.remove(job.id);
    agent.take(job.id);
  }

  /** Claim taken jobs in the store (one statement for all) and send each claimed one to its agent. */
  async claim(taken: Taken[]): Promise<boolean[]> {
    const jobs = this.deps.store.jobs;
    let specs = new Map<string, unknown>();
    let pairs = taken;
    const alts = this.alternates?.reserve(taken) ?? [];
    const claims = ClaimAlternates.requests(taken, alts);
    let durable = () => Promise.resolve();
    try {
      const ride = this.deps.writes.claimWith(claims, this.now(), this.deps.instanceId);
      if (ride) specs = await ride;
      else if (pairs.length === 1 && !claims[0]!.alts) {
        const { job, agent } = pairs[0]!;
        // Its sync is held until the job has left (sync-gate.ts).
        const held = await jobs.claimSpecHeld(job.id, agent.id, this.now(), this.deps.instanceId);
        durable = held.durable;
        if (held.value !== undefined) specs.set(job.id, held.value);
      } else specs = await jobs.claimMany(claims, this.now(), this.deps.instanceId);
      if (this.alternates) pairs = this.alternates.settle(taken, alts, specs);
    } catch (err) {
      this.alternates?.unsettled(taken, alts, (j, agentId) => this.settleUncertainClaim(j, agentId));
      for (const { job, agent } of pairs) {
        this.deps.log.error(
          { err: errorMessage(err), jobId: job.id },
          'could not claim job; it stays queued',
        );
        this.settleUncertainClaim(job, agent.id);
      }
    }
    const sent = await this.sendWon(pairs, specs);
    // The disk refused the claim's sync: the store fails every write from now on (sync-gate.ts).
    durable().catch((err: unknown) =>
      this.deps.log.error({ err: errorMessage(err) }, 'could not make a claim durable'),
    );
    return sent;
  }

  /** Send each won claim to its agent; a lost one frees its agent again. True per pair when sent. */
  private async sendWon(pairs: Taken[], specs: Map<string, unknown>): Promise<boolean[]> {
    const sent: boolean[] = [];
    let lost = false;
    for (const { job, agent } of pairs) {
      const spec = specs.get(job.id) as JobSpec | undefined;
      if (!spec) {
        agent.untake(job.id);
        lost = true;
        sent.push(false);
      } else sent.push(await this.sendClaimed(job, agent, spec));
    }
    // The agents a lost claim freed are looked at again (within a pass: once it is done).
    if (lost) this.deps.pump();
    return sent;
  }

  /** False when the agent left while its claim was in flight (the job is requeued). */
  private async sendClaimed(job: QueuedJob, agent: ConnectedAgent, spec: JobSpec): Promise<boolean> {
    const active: ActiveJob = { job, spec, agentId: agent.id, state: 'dispatched' };
    this.deps.active.track(active);
    // The agent's connection closed while the claim was in flight: its clean-up ran before this
    // job was active, and the job would stay dispatched to no one. It never saw the job: requeue.
    if (this.deps.registry.get(agent.id) !== agent) {
      await this.deps.active.requeue(active, `agent ${agent.id} left while the job was being dispatched`);
      return false;
    }
    if (agent.kind === 'scaler') this.deps.scaler?.onJobAssigned(agent.id);
    this.deps.active.armTimeout(active);
    const sealed = this.deps.sealed.get(job.id);
    // Masked before the agent can send a line of output.
    this.deps.logs.protect(job.id, [...secretValues(spec), ...(sealed?.mask ?? [])]);
    agent.send({ type: 'job.assign', job: toAssigned(job, spec, sealed?.env) });
    this.deps.log.info({ jobId: job.id, agentId: agent.id }, 'job dispatched');
    return true;
  }

  /**
   * A claim whose answer was lost (the connection broke around its commit) may or may not have
   * taken the row. The job is only queued again once the store says it is queued: the conditional
   * requeue undoes a claim that did commit, and is a no-op for one that did not.
   */
  private settleUncertainClaim(job: QueuedJob, agentId: string): void {
    this.uncertain.add(job.id);
    void retryWrite(
      async () => {
        await this.deps.store.jobs.requeue(job.id, agentId);
        return true;
      },
      () => !this.deps.stopped(),
      () => undefined, // the outage is already logged by the claim and by /readyz
    ).then((done) => {
      this.uncertain.delete(job.id);
      if (!done) return;
      this.deps.queue.add(job);
      this.deps.pump();
    });
  }
}
