import type { JobSpec } from '../jobs/run-spec.js';
import { failureReason } from '../jobs/failure-reason.js';
import { secretValues } from '../jobs/secret-mask.js';
import type { JobState } from '../store/index.js';
import { errorMessage } from '../util/errors.js';
import { setLongTimer } from '../util/long-timer.js';
import { retryWrite } from '../util/retry-write.js';
import type { ActiveJob, ActiveJobsDeps } from './active-job.js';
import { toQueued } from './job-rows.js';

/**
 * The jobs handed to agents and not yet settled, keyed by job id, and what happens to them: their
 * agent's reports, timeouts, a lost agent, a requeue. An entry is only dropped once the row that
 * replaces it is written, so a failed write leaves the job open instead of lost.
 */
export class ActiveJobs {
  /** Changed only through `track` and `forget`, which keep the queue's running counts in step. */
  private readonly byId = new Map<string, ActiveJob>();

  constructor(private readonly deps: ActiveJobsDeps) {}

  get(id: string): ActiveJob | undefined {
    return this.byId.get(id);
  }

  has(id: string): boolean {
    return this.byId.has(id);
  }

  values(): MapIterator<ActiveJob> {
    return this.byId.values();
  }

  get size(): number {
    return this.byId.size;
  }

  /**
   * The job is now `a`'s: handed to its agent (a claim), found active in the store (a start), or
   * taken over from a peer. Every entry added or dropped is told to the queue: fair share counts
   * each owner's running jobs.
   */
  track(a: ActiveJob): void {
    const prev = this.byId.get(a.job.id);
    if (prev !== a) {
      if (prev) this.deps.queue.noteEnded(prev.job);
      this.deps.queue.noteStarted(a.job);
    }
    this.byId.set(a.job.id, a);
  }

  private now(): Date {
    return new Date(this.deps.clock.now());
  }

  /** Settle the job itself should its agent never report: its own timeout plus the backstop. */
  armTimeout(a: ActiveJob): void {
    const seconds = a.spec.timeoutSeconds;
    if (!seconds) return;
    a.timeoutTimer?.cancel();
    // On the injected clock (tests drive it); a long timeout sleeps in chunks under Node's limit.
    a.timeoutTimer = setLongTimer(this.deps.clock, seconds * 1000 + this.deps.timeoutBackstopMs, () => {
      void this.settleActive(a.job.id, 'timed-out', null, `job exceeded its ${seconds}s timeout`, true);
    });
  }

  async onJobStarted(agentId: string, jobId: string): Promise<void> {
    const a = this.get(jobId);
    if (!a || a.agentId !== agentId) return;
    if (a.state !== 'running')
      this.deps.observer?.jobStarted(jobId, agentId, a.job.createdAtMs, this.deps.clock.now());
    a.state = 'running';
    const at = this.now();
    const mark = () => this.deps.store.jobs.markRunning(jobId, agentId, at);
    // Not awaited: the agent's next frames (steps, result) join the same group commit, which keeps
    // them in order after this mark.
    void this.deps.writes.running(jobId, agentId, at).then(
      () => this.deps.observer?.jobRunningStored?.(jobId, agentId),
      (err: unknown) => {
        // Left as 'dispatched', a restart would requeue a job that is running: keep trying while it runs.
        this.deps.log.warn({ err: errorMessage(err), jobId }, 'could not mark the job running; retrying');
        void retryWrite(
          async () => (await mark(), true),
          () => !this.deps.stopped() && this.get(jobId) === a,
          () => undefined,
        );
      },
    );
  }

  /** Step rows go with the group commit; a lost one is logged (the job's result does not depend on it). */
  stepStarted(jobId: string, idx: number, name: string, at: Date): void {
    this.deps.writes
      .stepStarted(jobId, idx, name, at)
      .catch((err: unknown) =>
        this.deps.log.error({ err: errorMessage(err), jobId, idx }, 'could not store a step start'),
      );
  }

  stepFinished(jobId: string, idx: number, exitCode: number | null, timedOut: boolean, at: Date): void {
    this.deps.writes
      .stepFinished(jobId, idx, exitCode, timedOut, at)
      .catch((err: unknown) =>
        this.deps.log.error({ err: errorMessage(err), jobId, idx }, 'could not store a step end'),
      );
  }

  async onJobFinished(
    agentId: string,
    jobId: string,
    result: JobState,
    exitCode: number | null,
    message?: string,
  ): Promise<boolean> {
    const agent = this.deps.registry.get(agentId);
    const a = this.get(jobId);
    if (a && a.agentId === agentId) {
      a.reported = true;
      // Not stored: the agent keeps the result (no ack) and stays busy with it until it is.
      if (!(await this.settleActive(jobId, result, exitCode, message ?? null, false))) return false;
    }
    agent?.freeFrom(jobId);
    if (agent && this.deps.registry.isAvailable(agent)) this.deps.pump();
    return true;
  }

  /**
   * Settle an active job once; later reports for it change nothing. False when the result could not
   * be stored: the job then stays active (cancellable, and settled again by its timers or a re-sent
   * result), because the in-memory entry is only dropped once the row that replaces it is written.
   */
  settleActive(
    jobId: string,
    state: JobState,
    exitCode: number | null,
    reason: string | null,
    tellAgent: boolean,
  ): Promise<boolean> {
    const a = this.get(jobId);
    if (!a) return Promise.resolve(true);
    if (!a.settling) {
      const settling = this.storeResult(a, state, exitCode, reason, tellAgent);
      a.settling = settling;
      void settling.then(() => {
        if (a.settling === settling) a.settling = undefined;
      });
    }
    return a.settling;
  }

  private async storeResult(
    a: ActiveJob,
    state: JobState,
    exitCode: number | null,
    reason: string | null,
    tellAgent: boolean,
  ): Promise<boolean> {
    const { logs, writes, store, log } = this.deps;
    const jobId = a.job.id;
    logs.jobEnded(jobId); // its held log tail is written with this flush
    await logs.flush();
    let done: boolean;
    try {
      // A failure without the agent's word is explained by its failing step and exit code.
      if (state === 'failed' && !reason) {
        await writes.flush(); // its step rows may still be pending
        reason = failureReason(await store.logs.steps(jobId), exitCode);
      }
      // Resolves once committed with the tick's other writes: only then may the agent be told.
      // In a cluster a peer may have taken the job over (its agent moved there): then it is theirs.
      const owner = this.deps.instanceId;
      // With queued work, the agent's next job rides on this commit: no reason to wait for the tick.
      done = await writes.finish(
        jobId,
        state,
        { exitCode, reason, ...(owner !== undefined ? { owner } : {}) },
        this.now(),
        a.reported === true && this.deps.queue.size > 0,
      );
    } catch (err) {
      log.error(
        { err: errorMessage(err), jobId, agentId: a.agentId, state, exitCode },
        'could not store the job result; the job stays open',
      );
      return false;
    }
    this.forget(a);
    if (done) log.info({ jobId, agentId: a.agentId, state, exitCode }, 'job finished');
    if (done) this.deps.observer?.jobFinished(jobId, state, this.deps.clock.now());
    if (tellAgent)
      this.deps.registry.get(a.agentId)?.send({ type: 'job.cancel', jobId, reason: reason ?? state });
    return true;
  }

  /** Drop the entry (if it is still this one) and its timers: its row no longer says it is active. */
  private forget(a: ActiveJob): void {
    if (this.byId.get(a.job.id) === a) {
      this.byId.delete(a.job.id);
      this.deps.queue.noteEnded(a.job);
    }
    a.timeoutTimer?.cancel();
    a.orphanTimer?.cancel();
  }

  /** dispatched → queued again: the agent never started it. */
  async requeue(a: ActiveJob, why: string): Promise<void> {
    // The write comes first: if it fails the job stays active (and cancellable) instead of vanishing.
    let requeued: boolean;
    try {
      requeued = await this.deps.store.jobs.requeue(a.job.id, a.agentId);
    } catch (err) {
      this.deps.log.error(
        { err: errorMessage(err), jobId: a.job.id, agentId: a.agentId, why },
        'could not requeue the job; it stays active',
      );
      return;
    }
    this.forget(a);
    if (requeued) {
      a.job.waiting = why;
      this.deps.queue.add(a.job);
      this.deps.log.info({ jobId: a.job.id, agentId: a.agentId, why }, 'job requeued');
    }
  }

  /**
   * Clustering: an agent reconnected here while running a job that another instance dispatched
   * (that instance died, or the agent's link moved). The job is taken over if it is still active
   * on this agent (one conditional update: one winner), and its reports are accepted from now on.
   */
  async adoptFromPeer(agentId: string, jobId: string): Promise<boolean> {
    const self = this.deps.instanceId;
    if (!self) return false;
    const jobs = this.deps.store.jobs;
    const seen = await jobs.get(jobId);
    const from = seen?.owner_instance ?? null;
    if (!seen || seen.agent_id !== agentId || from === self || !jobs.isActiveState(seen.state)) return false;
    const row = await jobs.adoptActive(jobId, agentId, { from, to: self }, this.now());
    if (!row) return false;
    const held = this.get(jobId);
    if (held?.agentId === agentId) held.state = 'running';
    else {
      const a: ActiveJob = { job: toQueued(row), spec: row.spec as JobSpec, agentId, state: 'running' };
      this.deps.queue.remove(jobId);
      this.track(a);
      this.deps.logs.protect(jobId, secretValues(a.spec));
      this.armTimeout(a);
    }
    this.deps.log.info({ jobId, agentId }, 'took over a job whose agent reconnected here');
    // Cancelled on some instance while its owner was away: carried out now (the agent is told on attach).
    if (row.cancel_requested_at)
      await this.settleActive(jobId, 'cancelled', null, row.cancel_reason ?? 'cancelled by operator', true);
    return true;
  }

  /** The agent of an active job is away: wait for it, then settle without running anything twice. */
  orphan(a: ActiveJob, why: string, graceMs = this.deps.reconnectGraceMs): void {
    a.orphanTimer?.cancel();
    a.orphanTimer = this.deps.clock.setTimer(
      graceMs,
      () =>
        void this.loseJob(a, `${why}; agent ${a.agentId} did not come back`).catch((err: unknown) =>
          this.deps.log.error(
            { err: errorMessage(err), jobId: a.job.id },
            'could not settle an orphaned job',
          ),
        ),
    );
  }

  /** Its agent came back still running it: it no longer waits to be settled. */
  agentReturned(a: ActiveJob): void {
    a.orphanTimer?.cancel();
    a.orphanTimer = undefined;
  }

  /** Its agent is gone for good: a job it never started is queued again, a started one fails. */
  async loseJob(a: ActiveJob, why: string): Promise<void> {
    if (this.get(a.job.id) !== a) return;
    if (a.state === 'dispatched') await this.requeue(a, why);
    else
      await this.settleActive(
        a.job.id,
        'failed',
        null,
        `${why}; the job was running and is not retried`,
        false,
      );
    this.deps.pump();
  }

  /** Stopping: no timer of an active job fires after this (their rows settle on the next start). */
  cancelTimers(): void {
    for (const a of this.values()) {
      a.timeoutTimer?.cancel();
      a.orphanTimer?.cancel();
    }
  }
}
