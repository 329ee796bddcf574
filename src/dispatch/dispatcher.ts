import { canonicalizeLabels, mirrorResources } from '../config/index.js';
import type { RunSpec, JobSpec } from '../jobs/run-spec.js';
import type { ScalerManager } from '../scaler/manager.js';
import { describeTable } from '../scaler/core/routing.js';
import type { JobRow, Store } from '../store/index.js';
import { GroupCommit } from '../store/group-commit.js';
import type { Clock } from '../util/clock.js';
import { errorMessage } from '../util/errors.js';
import type { Logger } from '../util/logger.js';
import { ActiveJobs, type JobObserver } from './active-jobs.js';
import { AgentRegistry, canAgentRunJob, type ConnectedAgent } from './agent-registry.js';
import { Claims } from './claims.js';
import { planDispatch, toScaleJob } from './dispatch-plan.js';
import { JobQueue, routingSpec, type QueuedJob } from './job-queue.js';
import { newId, toQueued, type ResyncHint } from './job-rows.js';
import { LogSink } from './log-sink.js';
import { SealedEnv, type Sealed } from './sealed-env.js';
import { StoreSync } from './store-sync.js';
import { StaticScopes } from './static-scopes.js';

export type { ActiveJob, JobObserver } from './active-jobs.js';

/** Said when a `container:` job finds no agent: which runtime it lacks. */
const CONTAINER_JOB_HINT =
  'a container: job needs an agent that reports kici:runtime:docker or kici:runtime:podman (a Docker or Podman socket on its host) or a container scaler';

export interface DispatcherOptions {
  store: Store;
  clock: Clock;
  logger: Logger;
  scaler?: ScalerManager | undefined;
  /** How long a job waits for its agent to reconnect (static agents, and everyone after a restart). */
  reconnectGraceMs?: number;
  /** Extra time past a job's own timeout before the orchestrator settles it itself. */
  timeoutBackstopMs?: number;
  /** Told when a job starts and when its final state is stored (metrics). */
  observer?: JobObserver | undefined;
  /**
   * Several orchestrators on one database: take the right to scale for a job before spawning.
   * 'other' means another live instance provisions for it; 'gone' that it is no longer queued.
   */
  scaleClaim?: ((jobId: string) => Promise<'mine' | 'other' | 'gone'>) | undefined;
  /**
   * Several orchestrators on one database: this instance's id. Claims are stamped with it, and a
   * start adopts only the active jobs it owns (another instance's running jobs are not ours).
   */
  instanceId?: string | undefined;
  /** Another orchestrator on the same database could provision for these labels. */
  peersCould?: ((runsOn: readonly string[]) => boolean) | undefined;
  /** Is this peer instance alive (clustering)? A sealed job whose holder is gone can never run. */
  peerAlive?: ((instanceId: string) => Promise<boolean>) | undefined;
  /** Group commit tick for the results; default 20 ms (marks wait up to 250 ms; see GroupCommit). */
  groupCommitMs?: number | undefined;
  /**
   * Idle agents take new jobs in the submit's own commit (default true). False: every job is
   * queued first and claimed by a dispatch pass (tests of the pass's claim path).
   */
  claimAtSubmit?: boolean | undefined;
}

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
  private pumping = false;
  private dirty = false;
  private idle: Promise<void> = Promise.resolve();
  private readonly startedAtMs: number;
  private readonly log: Logger;
  private stopped = false;
  /** A graceful stop is under way: no new assignments or spawns; active jobs run on and report. */
  private draining = false;
  /**
   * While this answers true (the data dir is nearly full) no queued job is handed out, so no new
   * output starts to pour in; running jobs go on and their results are stored.
   */
  holdNewWork: () => boolean = () => false;
  private readonly claims: Claims;
  /** Static agents that hold a live token may connect at any time: their jobs wait, not fail. */
  private readonly staticScopes = new StaticScopes();
  /** Values some jobs get at dispatch and the store never holds (sealed-env.ts). */
  private readonly sealed = new SealedEnv();
  private readonly passCost = { passes: 0, planMs: 0, passMs: 0 };
  /** Reads the store's open jobs back into the queue and the active set (store-sync.ts). */
  private readonly sync: StoreSync;

  constructor(private readonly opts: DispatcherOptions) {
    this.log = opts.logger.child({ component: 'dispatcher' });
    this.logs = new LogSink(opts.store, this.log);
    this.writes = new GroupCommit(opts.store.db, opts.store, opts.groupCommitMs);
    // A job's sealed values go once it is final, whoever settles it.
    this.opts = opts = { ...opts, observer: this.sealed.forgetOnFinish(opts.observer) };
    this.active = new ActiveJobs({
      store: opts.store,
      clock: opts.clock,
      log: this.log,
      writes: this.writes,
      logs: this.logs,
      queue: this.queue,
      registry: this.registry,
      observer: opts.observer,
      instanceId: opts.instanceId,
      reconnectGraceMs: this.reconnectGraceMs,
      timeoutBackstopMs: opts.timeoutBackstopMs ?? 30_000,
      pump: () => void this.requestPump(),
      stopped: () => this.stopped,
    });
    this.claims = new Claims({
      store: opts.store,
      writes: this.writes,
      queue: this.queue,
      registry: this.registry,
      active: this.active,
      scaler: opts.scaler,
      clock: opts.clock,
      log: this.log,
      instanceId: opts.instanceId,
      pump: () => void this.requestPump(),
      halted: () => this.stopped || this.draining || this.holdNewWork(),
      stopped: () => this.stopped,
      sealed: this.sealed,
      logs: this.logs,
    });
    this.sync = new StoreSync({
      store: opts.store,
      clock: opts.clock,
      log: this.log,
      queue: this.queue,
      active: this.active,
      logs: this.logs,
      sealed: this.sealed,
      claims: this.claims,
      observer: opts.observer,
      instanceId: opts.instanceId,
      peerAlive: opts.peerAlive,
      refreshStaticScopes: () => this.refreshStaticScopes(),
      pump: () => void this.requestPump(),
    });
    this.writes.rideOnResults((finished) => this.claims.rideOnResults(finished));
    this.startedAtMs = opts.clock.now();
  }

  /** What the scaler's warm pools may see of the registry. */
  registryView() {
    return {
      isIdle: (id: string) => {
        const a = this.registry.get(id);
        return !!a && this.registry.isAvailable(a);
      },
      tryDrain: (id: string) => {
        const a = this.registry.get(id);
        if (!a || !this.registry.isAvailable(a)) return false;
        a.draining = true;
        return true;
      },
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

  /** Could an agent that takes any job of the job's group run it? Then every job of the group could. */
  private groupCould(job: QueuedJob): boolean {
    const scaler = this.opts.scaler;
    return (
      this.registry.anyCould(job, (a) => a.kind !== 'scaler' || !scaler) ||
      this.staticScopes.could(job, this.opts.clock.now()) ||
      (this.opts.peersCould?.(job.runsOn) ?? false)
    );
  }

  private someoneCould(job: QueuedJob): boolean {
    return (
      this.registry.anyCould(job, (a) => this.claims.fits(a.id, job)) ||
      this.staticScopes.could(job, this.opts.clock.now()) ||
      (this.opts.peersCould?.(job.runsOn) ?? false)
    );
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
  async submit(
    spec: RunSpec,
    sealed?: Sealed,
  ): Promise<{ runId: string; jobs: { id: string; name: string }[] }> {
    const runId = newId('r');
    const sealedEnv = sealed ? Object.keys(sealed.env) : [];
    const now = this.now();
    const jobs = Object.entries(spec.jobs).map(([name, js]) => ({
      id: newId('j'),
      name,
      runsOn: canonicalizeLabels(js.runsOn),
      spec: {
        ...js,
        resources: mirrorResources(js.resources),
        // The holder is named so that peers can tell when it is gone (resyncQueued).
        ...(sealedEnv.length
          ? { sealedEnv, ...(this.opts.instanceId && { sealedBy: this.opts.instanceId }) }
          : {}),
      } as JobSpec,
      priority: js.priority ?? spec.priority ?? 0,
      owner: spec.owner ?? null,
    }));
    if (sealed) for (const j of jobs) this.sealed.hold(j.id, sealed);
    // Idle agents take what they can at once, claimed in the submit's own commit (claims.ts).
    const queued = jobs.map((j, seq) => ({
      id: j.id,
      runId,
      name: j.name,
      seq,
      runsOn: j.runsOn,
      spec: routingSpec(j.spec),
      createdAtMs: now.getTime(),
      priority: j.priority,
      owner: j.owner ?? undefined,
    }));
    const taken = this.opts.claimAtSubmit === false ? [] : this.claims.takeNew(queued);
    const claimOf = new Map(taken.map((t) => [t.job.id, t.agent.id]));
    const owner = this.opts.instanceId;
    let rows: JobRow[];
    try {
      rows = await this.opts.store.jobs.insertRun(
        { id: runId, name: spec.name ?? null },
        jobs.map((j) => {
          const agentId = claimOf.get(j.id);
          return agentId ? { ...j, claim: { agentId, owner } } : j;
        }),
        now,
      );
    } catch (err) {
      this.claims.untake(taken);
      throw err;
    }
    const specs = new Map<string, unknown>();
    const seqOf = new Map<string, number>();
    const toQueue: QueuedJob[] = [];
    for (const row of rows) {
      if (!claimOf.has(row.id)) toQueue.push(toQueued(row));
      else if (row.state === 'dispatched') specs.set(row.id, row.spec);
      seqOf.set(row.id, Number(row.seq));
    }
    this.queue.addMany(toQueue);
    for (const t of taken) t.job.seq = seqOf.get(t.job.id) ?? t.job.seq;
    if (taken.length) void this.claims.sendNew(taken, specs);
    this.log.info({ runId, jobs: rows.length, dispatchedAtOnce: taken.length }, 'run submitted');
    if (rows.length > taken.length) void this.requestPump();
    return { runId, jobs: rows.map((r) => ({ id: r.id, name: r.name })) };
  }

  /** Coalescing: a request during a pass makes the pass run once more, never twice at once. */
  requestPump(): Promise<void> {
    if (this.stopped || this.draining || this.holdNewWork()) return this.idle;
    if (this.pumping) {
      this.dirty = true;
      return this.idle;
    }
    this.pumping = true;
    this.idle = (async () => {
      try {
        // One turn of the event loop first: results stored together free their agents together,
        // and one pass then fills them all with one claim statement instead of a pass each.
        await new Promise<void>((r) => setImmediate(r));
        do {
          this.dirty = false;
          await this.pass();
        } while (this.dirty && !this.stopped && !this.draining);
      } catch (err) {
        this.log.error({ err: errorMessage(err) }, 'dispatch pass failed');
      } finally {
        this.pumping = false;
      }
    })();
    return this.idle;
  }

  /**
   * Reconcile passes run so far, and the time they took: the synchronous plan over the whole queue
   * (CPU on the event loop) and the whole pass with its claim statements (wall).
   */
  passStats(): Readonly<{ passes: number; planMs: number; passMs: number }> {
    return { ...this.passCost };
  }

  /** The decision half of a reconcile: synchronous, no I/O. */
  plan(idleAgents: Parameters<typeof planDispatch>[1] = this.registry.free()) {
    return planDispatch(this.queue, idleAgents, this.opts.scaler, this.opts.clock.now());
  }

  /** One reconcile: the pure planner decides for the whole queue, then its decisions are applied. */
  private async pass(): Promise<void> {
    // Nothing queued, nothing to plan: skip listing every idle agent (an agent registering, a
    // result stored, in a fleet of thousands, would each cost a scan of the fleet).
    if (!this.queue.size) return;
    const t0 = performance.now();
    try {
      await this.passOver(t0);
    } finally {
      this.passCost.passes++;
      this.passCost.passMs += performance.now() - t0;
    }
  }

  private async passOver(t0: number): Promise<void> {
    const scaler = this.opts.scaler;
    const { groups, plan } = this.plan();
    this.passCost.planMs += performance.now() - t0;
    // Jobs being provisioned keep their own reason while their group is given one: listed once per
    // pass (they are few), by group, and joined by those this pass provisions.
    const provisioning = new Map<string, string[]>();
    const noteProvisioning = (id: string) => {
      const key = this.queue.groupOf(id);
      if (key !== undefined) provisioning.set(key, [...(provisioning.get(key) ?? []), id]);
    };
    for (const id of scaler?.provisioningJobs() ?? []) noteProvisioning(id);
    for (const [n, d] of plan.entries()) {
      if (this.stopped || this.draining) return;
      const group = groups[n]!;
      const taken = this.claims.takeAssigned(d.assign);
      // One claim statement for the group's assignments. A job lost to another orchestrator's
      // claim leaves its agent idle, so look again.
      if (taken.length) for (const ok of await this.claims.claim(taken)) if (!ok) this.dirty = true;
      let reason = d.reason;
      for (const sp of d.spawn) {
        const job = this.queue.get(sp.jobId);
        if (!job || !scaler || scaler.isProvisioning(job.id)) continue;
        if (this.opts.scaleClaim) {
          const claim = await this.opts.scaleClaim(job.id).catch((err: unknown) => {
            // Not "someone else has it": nobody may. The job stays queued and the next pass asks again.
            this.log.warn(
              { jobId: job.id, err: errorMessage(err) },
              'could not take the right to provision for a job; will try again',
            );
            job.waiting = `cannot reach the store to provision for it (${errorMessage(err)}); retrying`;
            return 'error' as const;
          });
          if (claim === 'gone') this.queue.remove(job.id);
          if (claim === 'other') job.waiting = 'another orchestrator provisions an agent for it';
          if (claim !== 'mine') continue;
        }
        const r = await scaler.requestScale(this.scaleJob(job));
        if (r.action === 'spawning') {
          job.waiting = `provisioning agent ${r.agentId} (scaler "${r.scalerName}")`;
          noteProvisioning(job.id);
        } else if (r.action !== 'skipped' || r.reason !== 'provision-in-flight') {
          reason = r.reason;
          break;
        }
      }
      // Jobs being provisioned keep their own reason; the rest of the group shares one, set once.
      const keep = (provisioning.get(group.key) ?? []).filter((id) => scaler?.isProvisioning(id));
      const firstLeft = firstWhere(group.jobs(), (j) => !scaler?.isProvisioning(j.id));
      // Held by a cap (not backoff or a missing backend): idle warm stock of another label set
      // may give its room up (warm-pool.ts).
      const capped = d.action === 'at-capacity' || d.action === 'spawn';
      if (scaler && capped && d.match && firstLeft) scaler.yieldWarmFor(this.scaleJob(firstLeft), d.match);
      if (d.noBackend && firstLeft) {
        const hint = firstLeft.spec.container ? `; ${CONTAINER_JOB_HINT}` : '';
        // An agent that is not bound to one job fits every job of the group alike: one look for all.
        if (this.groupCould(firstLeft)) {
          this.queue.setGroupReason(group.source, `waiting for a matching agent${hint}`, keep);
          continue;
        }
        const left = [...group.jobs()].filter((j) => !scaler?.isProvisioning(j.id));
        const why = scaler
          ? `${d.noBackend}; ${describeTable(scaler.routingTable())}`
          : 'no scaler is configured and no agent token matches these labels';
        // In a cluster a peer may have issued a token since we last read them: read again first.
        if (this.opts.instanceId && left.some((j) => !this.someoneCould(j))) await this.refreshStaticScopes();
        for (const job of left) {
          if (this.someoneCould(job)) job.waiting = `waiting for a matching agent${hint}`;
          else await this.settleNoBackend(job, `${why}${hint}`);
        }
      } else if (reason && !d.noBackend) this.queue.setGroupReason(group.source, reason, keep);
    }
  }

  readonly scaleJob = toScaleJob;

  /** Hand one queued job to one agent. False when the job was no longer queued. */
  assign(job: QueuedJob, agent: ConnectedAgent): Promise<boolean> {
    return this.claims.assign(job, agent);
  }

  private async settleNoBackend(job: QueuedJob, reason: string): Promise<void> {
    // Right after a restart, give operators' agents a moment to reconnect before judging old jobs.
    if (job.createdAtMs < this.startedAtMs && this.opts.clock.now() - this.startedAtMs < 15_000) {
      job.waiting = `waiting for agents to reconnect after restart (${reason})`;
      return;
    }
    this.queue.remove(job.id);
    let done: boolean;
    try {
      done = await this.opts.store.jobs.finish(
        job.id,
        'no-backend',
        { reason, fromState: 'queued' },
        this.now(),
      );
    } catch (err) {
      this.queue.add(job); // judged again on the next pass
      throw err;
    }
    if (done) this.opts.observer?.jobFinished(job.id, 'no-backend', this.opts.clock.now());
    this.log.warn({ jobId: job.id, runsOn: job.runsOn, reason }, 'job has no backend');
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
    return this.idle;
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await this.idle;
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

function firstWhere<T>(items: Iterable<T>, test: (item: T) => boolean): T | undefined {
  for (const item of items) if (test(item)) return item;
  return undefined;
}
