import type { RunSpec } from '../jobs/run-spec.js';
import type { ScalerManager } from '../scaler/manager.js';
import { GroupCommit } from '../store/group-commit.js';
import type { Logger } from '../util/logger.js';
import type { ActiveJobs } from './active-jobs.js';
import { AgentRegistry, canAgentRunJob, type ConnectedAgent } from './agent-registry.js';
import type { Claims } from './claims.js';
import type { DispatchPass } from './dispatch-pass.js';
import { planDispatch, toScaleJob } from './dispatch-plan.js';
import type { DispatcherOptions } from './dispatcher-options.js';
import { assembleDispatcherParts } from './dispatcher-parts.js';
import { JobQueue, type QueuedJob } from './job-queue.js';
import type { ResyncHint } from './job-rows.js';
import { LogSink } from './log-sink.js';
import type { Pump } from './pump.js';
import type { RunSubmit } from './run-submit.js';
import { SealedEnv, type Sealed } from './sealed-env.js';
import type { StoreSync } from './store-sync.js';
import { StaticScopes } from './static-scopes.js';

export type { ActiveJob, JobObserver } from './active-job.js';
export type { DispatcherOptions } from './dispatcher-options.js';

/**
 * Offers queued jobs to idle agents, and asks the scaler for an agent when none fits. The queue and
 * the agent registry live in memory; every state change is a conditional row update, so no job is
 * ever assigned twice.
 */
export class Dispatcher {
  readonly queue = new JobQueue();
  readonly registry = new AgentRegistry();
  /** Jobs handed to agents and not yet settled, and their lifecycle (active-jobs.ts). */
  readonly active: ActiveJobs;
  readonly logs: LogSink;
  /** The per-job writes of the hot path, committed together once per short tick. */
  readonly writes: GroupCommit;
  private readonly log: Logger;
  private stopped = false;
  /** A graceful stop is under way: no new assignments or spawns; active jobs run on and report. */
  private draining = false;
  private holdNewWork: () => boolean = () => false;
  private readonly claims: Claims;
  /** Static agents that hold a live token may connect at any time: their jobs wait, not fail. */
  private readonly staticScopes = new StaticScopes();
  /** Values some jobs get at dispatch and the store never holds (sealed-env.ts). */
  private readonly sealed = new SealedEnv();
  /** Reads the store's open jobs back into the queue and the active set (store-sync.ts). */
  private readonly sync: StoreSync;
  /** Stores a submitted run, its jobs claimed at once where idle agents fit (run-submit.ts). */
  private readonly submits: RunSubmit;
  /** Runs the reconcile passes one at a time (pump.ts). */
  private readonly pump: Pump;
  /** Applies each pass's plan (dispatch-pass.ts). */
  private readonly passes: DispatchPass;

  constructor(private readonly opts: DispatcherOptions) {
    this.log = opts.logger.child({ component: 'dispatcher' });
    this.logs = new LogSink(opts.store, this.log);
    this.writes = new GroupCommit(opts.store.db, opts.store, opts.groupCommitMs);
    // A job's sealed values go once it is final, whoever settles it.
    this.opts = opts = { ...opts, observer: this.sealed.forgetOnFinish(opts.observer) };
    const parts = assembleDispatcherParts(opts, {
      log: this.log,
      logs: this.logs,
      writes: this.writes,
      queue: this.queue,
      registry: this.registry,
      sealed: this.sealed,
      staticScopes: this.staticScopes,
      reconnectGraceMs: this.reconnectGraceMs,
      pump: () => void this.requestPump(),
      pass: () => this.pass(),
      // Through the method, not planDispatch itself: a watcher that wraps `plan` sees every pass.
      plan: () => this.plan(),
      refreshStaticScopes: () => this.refreshStaticScopes(),
      stopped: () => this.stopped,
      ending: () => this.stopped || this.draining,
      halted: () => this.stopped || this.draining || this.holdNewWork(),
    });
    ({ active: this.active, claims: this.claims, sync: this.sync } = parts);
    ({ submits: this.submits, pump: this.pump, passes: this.passes } = parts);
  }

  /** What the scaler's warm pools may see of the registry. */
  registryView() {
    return {
      isIdle: (id: string) => {
        const a = this.registry.get(id);
        return !!a && this.registry.isAvailable(a);
      },
      tryDrain: (id: string) => this.registry.drainIfIdle(id),
    };
  }

  noteStaticToken(agentId: string, labels: string[], expiresAt: Date | null): void {
    this.staticScopes.note(agentId, labels, expiresAt);
  }

  /** How long a static agent that dropped may take to come back (it is listed as disconnected meanwhile). */
  get reconnectGraceMs(): number {
    return this.opts.reconnectGraceMs ?? 30_000;
  }

  /** Reload the static scopes from the store: a revoked token no longer keeps its labels' jobs waiting. */
  refreshStaticScopes(): Promise<void> {
    return this.staticScopes.reload(this.opts.store, this.now());
  }

  get scaler(): ScalerManager | undefined {
    return this.opts.scaler;
  }

  private now(): Date {
    return new Date(this.opts.clock.now());
  }

  /**
   * Store a run and queue its jobs. `sealed` values are given to every job of the run at dispatch
   * and never stored: the stored spec names the variables only.
   */
  /**
   * While `held` answers true (the data dir is nearly full) no queued job is handed out, so no new
   * output starts to pour in; running jobs go on and their results are stored.
   */
  holdNewWorkWhile(held: () => boolean): void {
    this.holdNewWork = held;
  }

  submit(spec: RunSpec, sealed?: Sealed): Promise<{ runId: string; jobs: { id: string; name: string }[] }> {
    return this.submits.submit(spec, sealed);
  }

  /** Coalescing: a request during a pass makes the pass run once more, never twice at once. */
  requestPump(): Promise<void> {
    return this.pump.request();
  }

  /**
   * Reconcile passes run so far, and the time they took: the synchronous plan over the whole queue
   * (CPU on the event loop) and the whole pass with its claim statements (wall).
   */
  passStats(): Readonly<{ passes: number; planMs: number; passMs: number }> {
    return this.passes.stats();
  }

  /** The decision half of a reconcile: synchronous, no I/O. */
  plan(idleAgents: Parameters<typeof planDispatch>[1] = this.registry.free()) {
    return planDispatch(this.queue, idleAgents, this.opts.scaler, this.opts.clock.now());
  }

  /** One reconcile: the pure planner decides, then its decisions are applied (bench/reconcile.ts times it). */
  private pass(): Promise<void> {
    return this.passes.run();
  }

  readonly scaleJob = toScaleJob;

  /**
   * Hand one queued job to one agent. False when the agent got nothing: the job was no longer
   * queued (in a cluster, nor were the next ones its claim offered instead).
   */
  assign(job: QueuedJob, agent: ConnectedAgent): Promise<boolean> {
    return this.claims.assign(job, agent);
  }

  /** Queued rows of the store this process does not hold yet, queued here (StoreSync.resync). */
  resyncQueued(hint?: ResyncHint): Promise<number> {
    return this.sync.resync(hint);
  }

  /** A freshly registered scaler agent takes the job it was spawned for, if that job still waits. */
  async dispatchBound(agentId: string, jobId: string): Promise<void> {
    if (this.draining) return; // the job stays queued for the next start
    const agent = this.registry.get(agentId);
    const job = this.queue.get(jobId);
    if (
      agent &&
      job &&
      this.registry.isAvailable(agent) &&
      canAgentRunJob(agent, job) &&
      (this.opts.scaler?.agentFits(agentId, this.scaleJob(job)) ?? true)
    ) {
      if (await this.assign(job, agent)) return;
    }
    await this.requestPump();
  }

  /** Cancel a queued job here, or an active one (its agent is told to stop). */
  async cancel(jobId: string, reason = 'cancelled by operator'): Promise<'cancelled' | 'not-open'> {
    if (this.queue.remove(jobId)) {
      // Only while still queued: another instance may have claimed it since we read it.
      if (
        await this.opts.store.jobs.finish(jobId, 'cancelled', { reason, fromState: 'queued' }, this.now())
      ) {
        this.opts.observer?.jobFinished(jobId, 'cancelled', this.opts.clock.now());
        return 'cancelled';
      }
      if (!this.opts.instanceId) return 'cancelled';
    }
    if (this.active.has(jobId)) {
      if (!(await this.active.settleActive(jobId, 'cancelled', null, reason, true)))
        throw new Error(`could not store the cancellation of job ${jobId}; it is still open`);
      return 'cancelled';
    }
    return 'not-open';
  }

  /** Open jobs from the store after a start: queued ones queue again, active ones await their agent. */
  recover(): Promise<{ queued: number; awaiting: number }> {
    return this.sync.recover();
  }

  /** Take no new work from now on; resolves once a pass in progress has ended. */
  drain(): Promise<void> {
    this.draining = true;
    return this.pump.idle;
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await this.pump.idle;
    this.active.cancelTimers();
    const dropped = await this.logs.close();
    if (dropped.size)
      this.log.warn(
        { jobs: Object.fromEntries(dropped), lines: [...dropped.values()].reduce((a, b) => a + b, 0) },
        'job output held while the data dir was nearly full was not stored: stopped before space returned; each job log says how many lines are missing',
      );
    await this.writes.flush();
  }
}
