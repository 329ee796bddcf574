import { randomBytes } from 'node:crypto';
import { canonicalizeLabels, mirrorResources } from '../config/index.js';
import { failureReason } from '../jobs/failure-reason.js';
import type { RunSpec, JobSpec } from '../jobs/run-spec.js';
import type { AssignedJob } from '../protocol/messages.js';
import type { ScalerManager } from '../scaler/manager.js';
import type { ScaleJob } from '../scaler/types.js';
import { CapBook } from '../scaler/core/caps.js';
import { planReconcile } from '../scaler/core/plan.js';
import { describeTable } from '../scaler/core/routing.js';
import type { JobRow, JobState, Store } from '../store/index.js';
import { GroupCommit, type ResultRide } from '../store/group-commit.js';
import type { Clock, TimerHandle } from '../util/clock.js';
import { errorMessage } from '../util/errors.js';
import { setLongTimer } from '../util/long-timer.js';
import { retryWrite } from '../util/retry-write.js';
import type { Logger } from '../util/logger.js';
import { AgentRegistry, canAgentRunJob, type ConnectedAgent } from './agent-registry.js';

/** Said when a `container:` job finds no agent: which runtime it lacks (spec C.13). */
const CONTAINER_JOB_HINT =
  'a container: job needs an agent that reports kici:runtime:docker or kici:runtime:podman (a Docker or Podman socket on its host) or a container scaler';
import { JobQueue, routingSpec, type QueuedJob } from './job-queue.js';
import { LogSink } from './log-sink.js';

export interface ActiveJob {
  job: QueuedJob;
  /** The full spec, loaded with the claim (queued jobs keep only their routing facts in memory). */
  spec: JobSpec;
  agentId: string;
  state: 'dispatched' | 'running';
  /** The agent went away; the job waits this long for it to come back before it is settled. */
  orphanTimer?: TimerHandle | undefined;
  timeoutTimer?: TimerHandle | undefined;
  /** The result being written; a second report for the job waits for it instead of writing again. */
  settling?: Promise<boolean>;
  /** Its agent reported the result (so the agent is free once it is stored). */
  reported?: boolean;
}

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
  /** Group commit tick for the results; default 20 ms (marks wait up to 250 ms; see GroupCommit). */
  groupCommitMs?: number | undefined;
}

/** A queued job taken for an agent, its claim not yet stored. */
interface Taken {
  job: QueuedJob;
  agent: ConnectedAgent;
}

export interface JobObserver {
  jobStarted(jobId: string, agentId: string, submittedAtMs: number, nowMs: number): void;
  jobFinished(jobId: string, result: JobState, nowMs: number): void;
}

const NO_CAPS = new CapBook({ globalMaxAgents: 0, scalers: new Map() });

export const newId = (prefix: string) => `${prefix}-${randomBytes(6).toString('hex')}`;

/**
 * Offers queued jobs to idle agents, and asks the scaler for an agent when none fits. The queue and
 * the agent registry live in memory; every state change is a conditional row update, so no job is
 * ever assigned twice.
 */
export class Dispatcher {
  readonly queue = new JobQueue();
  readonly registry = new AgentRegistry();
  readonly active = new Map<string, ActiveJob>();
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
  /** Jobs whose claim outcome is being checked after a store error (neither queued nor active). */
  private readonly uncertain = new Set<string>();
  /** Static agents that hold a live token may connect at any time: their jobs wait, not fail. */
  private readonly staticScopes = new Map<string, { labels: Set<string>; expiresAtMs: number | null }>();

  constructor(private readonly opts: DispatcherOptions) {
    this.log = opts.logger.child({ component: 'dispatcher' });
    this.logs = new LogSink(opts.store, this.log);
    this.writes = new GroupCommit(opts.store.db, opts.store, opts.groupCommitMs);
    this.writes.rideOnResults((finished) => this.rideOnResults(finished));
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
    this.staticScopes.set(agentId, { labels: new Set(labels), expiresAtMs: expiresAt?.getTime() ?? null });
  }

  /** How long a static agent that dropped may take to come back (it is listed as disconnected meanwhile). */
  get reconnectGraceMs(): number {
    return this.opts.reconnectGraceMs ?? 30_000;
  }

  /** Reload the static scopes from the store: a revoked token no longer keeps its labels' jobs waiting. */
  async refreshStaticScopes(): Promise<void> {
    const scopes = await this.opts.store.tokens.staticScopes(this.now());
    this.staticScopes.clear();
    for (const s of scopes) this.noteStaticToken(s.agentId, s.labels, s.expiresAt);
  }

  /** Could a known static agent (connected or not) ever take this job? */
  private staticCould(job: QueuedJob): boolean {
    const now = this.opts.clock.now();
    for (const s of this.staticScopes.values()) {
      if (s.expiresAtMs !== null && s.expiresAtMs <= now) continue;
      if (job.runsOn.every((l) => s.labels.has(l))) return true;
    }
    return false;
  }

  private someoneCould(job: QueuedJob): boolean {
    return (
      this.registry.anyCould(job, (a) => this.fits(a.id, job)) ||
      this.staticCould(job) ||
      (this.opts.peersCould?.(job.runsOn) ?? false)
    );
  }

  get scaler(): ScalerManager | undefined {
    return this.opts.scaler;
  }

  private now(): Date {
    return new Date(this.opts.clock.now());
  }

  async submit(spec: RunSpec): Promise<{ runId: string; jobs: { id: string; name: string }[] }> {
    const runId = newId('r');
    const jobs = Object.entries(spec.jobs).map(([name, js]) => ({
      id: newId('j'),
      name,
      runsOn: canonicalizeLabels(js.runsOn),
      spec: { ...js, resources: mirrorResources(js.resources) } as JobSpec,
    }));
    const rows = await this.opts.store.jobs.insertRun(
      { id: runId, name: spec.name ?? null },
      jobs,
      this.now(),
    );
    for (const row of rows) this.queue.add(toQueued(row));
    this.log.info({ runId, jobs: rows.length }, 'run submitted');
    this.requestPump();
    return { runId, jobs: rows.map((r) => ({ id: r.id, name: r.name })) };
  }

  /** Coalescing: a request during a pass makes the pass run once more, never twice at once. */
  requestPump(): Promise<void> {
    if (this.stopped || this.draining) return this.idle;
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

  /** The decision half of a reconcile: synchronous, no I/O. */
  plan(idleAgents = this.registry.idle()) {
    const scaler = this.opts.scaler;
    const now = this.opts.clock.now();
    const groups = this.queue.orderedGroups().map((g) => {
      const sample = g.first;
      return {
        key: g.key,
        labels: g.labels,
        role: sample.spec.role,
        exclude: sample.spec.excludeLabels ? canonicalizeLabels(sample.spec.excludeLabels) : undefined,
        image: sample.spec.container?.image,
        size: g.size,
        jobIds: function* () {
          for (const j of g.jobs()) yield j.id;
        },
        jobs: g.jobs,
        sample,
      };
    });
    const perScaler = new Map<string, number>();
    for (const b of scaler?.backendList() ?? []) perScaler.set(b.name, b.getActiveCount());
    // The scaler's own decision facts, so the plan decides exactly as requestScale and explain do.
    const facts = scaler?.decisionState();
    const plan = planReconcile({
      groups,
      idleAgents,
      canRun: (a, g) =>
        canAgentRunJob(a, g.sample) &&
        (a.kind !== 'scaler' || !scaler || scaler.agentFits(a.id, this.scaleJob(g.sample))),
      table: scaler?.routingTable() ?? [],
      caps: scaler?.capBook() ?? NO_CAPS,
      live: { global: scaler?.globalActiveCount() ?? 0, perScaler },
      backoff: (key) => facts?.backoff(key, now) ?? { blocked: false },
      isProvisioning: (id) => scaler?.isProvisioning(id) ?? false,
      requestsFor: (m, g) => scaler!.resourcesFor(m, this.scaleJob(g.sample)).requests,
      scaling: scaler !== undefined,
      ...(facts && {
        now,
        draining: facts.draining,
        hasBackend: facts.hasBackend,
        machinePool: facts.machinePool,
        ...(facts.streak && { streak: facts.streak }),
      }),
    });
    return { groups, plan };
  }

  /** One reconcile: the pure planner decides for the whole queue, then its decisions are applied. */
  private async pass(): Promise<void> {
    const scaler = this.opts.scaler;
    const { groups, plan } = this.plan();
    for (const [n, d] of plan.entries()) {
      if (this.stopped || this.draining) return;
      const group = groups[n]!;
      const taken = this.takeAssigned(d.assign);
      // One claim statement for the group's assignments. A job lost to another orchestrator's
      // claim leaves its agent idle, so look again.
      if (taken.length) for (const ok of await this.claimTaken(taken)) if (!ok) this.dirty = true;
      let reason = d.reason;
      for (const sp of d.spawn) {
        const job = this.queue.get(sp.jobId);
        if (!job || !scaler || scaler.isProvisioning(job.id)) continue;
        if (this.opts.scaleClaim) {
          const claim = await this.opts.scaleClaim(job.id).catch(() => 'other' as const);
          if (claim === 'gone') this.queue.remove(job.id);
          if (claim === 'other') job.waiting = 'another orchestrator provisions an agent for it';
          if (claim !== 'mine') continue;
        }
        const r = await scaler.requestScale(this.scaleJob(job));
        if (r.action === 'spawning')
          job.waiting = `provisioning agent ${r.agentId} (scaler "${r.scalerName}")`;
        else if (r.action !== 'skipped' || r.reason !== 'provision-in-flight') {
          reason = r.reason;
          break;
        }
      }
      const left = [...group.jobs()].filter((j) => !scaler?.isProvisioning(j.id));
      // Held by a cap (not backoff or a missing backend): idle warm stock of another label set
      // may give its room up (warm-pool.ts).
      const capped = d.action === 'at-capacity' || d.action === 'spawn';
      if (scaler && capped && d.match && left[0]) scaler.yieldWarmFor(this.scaleJob(left[0]), d.match);
      if (d.noBackend) {
        const why = scaler
          ? `${d.noBackend}; ${describeTable(scaler.routingTable())}`
          : 'no scaler is configured and no agent token matches these labels';
        // In a cluster a peer may have issued a token since we last read them: read again first.
        if (this.opts.instanceId && left.some((j) => !this.someoneCould(j))) await this.refreshStaticScopes();
        for (const job of left) {
          if (this.someoneCould(job))
            job.waiting = `waiting for a matching agent${job.spec.container ? `; ${CONTAINER_JOB_HINT}` : ''}`;
          else await this.settleNoBackend(job, job.spec.container ? `${why}; ${CONTAINER_JOB_HINT}` : why);
        }
      } else if (reason) for (const job of left) job.waiting = reason;
    }
  }

  /** Take a plan's assignments that still hold (the plan decided per group; state may have moved). */
  private takeAssigned(assign: readonly { jobId: string; agentId: string }[]): Taken[] {
    const taken: Taken[] = [];
    for (const a of assign) {
      const job = this.queue.get(a.jobId);
      const agent = this.registry.get(a.agentId);
      if (
        job &&
        agent &&
        this.registry.isAvailable(agent) &&
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
  private rideOnResults(finished: string[]): ResultRide | undefined {
    if (this.stopped || this.draining || !this.queue.size) return undefined;
    const freed = new Map<ConnectedAgent, string>();
    for (const jobId of finished) {
      const a = this.active.get(jobId);
      const agent = a?.reported ? this.registry.get(a.agentId) : undefined;
      if (agent?.busyJobId !== jobId) continue;
      agent.busyJobId = undefined;
      if (this.registry.isAvailable(agent)) freed.set(agent, jobId);
      else agent.busyJobId = jobId;
    }
    if (!freed.size) return undefined;
    const taken: Taken[] = [];
    try {
      for (const d of this.plan([...freed.keys()]).plan) taken.push(...this.takeAssigned(d.assign));
    } finally {
      // Not given work: it stays busy with its result until the commit, as without a ride.
      for (const [agent, jobId] of freed) if (agent.busyJobId === undefined) agent.busyJobId = jobId;
    }
    if (!taken.length) return undefined;
    return {
      claims: taken.map((p) => ({ jobId: p.job.id, agentId: p.agent.id })),
      at: this.now(),
      owner: this.opts.instanceId,
      // After this turn's microtasks: the result's ack leaves before the next job's assignment.
      claimed: (won) => void setImmediate(() => void this.sendWon(taken, won)),
      failed: (err) => {
        for (const { job, agent } of taken) {
          this.log.error({ err: errorMessage(err), jobId: job.id }, 'could not claim job; it stays queued');
          this.settleUncertainClaim(job, agent.id);
          agent.jobsTaken--;
          agent.busyJobId = freed.get(agent); // its result is retried; it is free once that is stored
        }
      },
    };
  }

  private fits(agentId: string, job: QueuedJob): boolean {
    const a = this.registry.get(agentId);
    return (
      !a ||
      a.kind !== 'scaler' ||
      !this.opts.scaler ||
      this.opts.scaler.agentFits(agentId, this.scaleJob(job))
    );
  }

  scaleJob(job: QueuedJob): ScaleJob {
    return {
      id: job.id,
      runId: job.runId,
      runsOn: job.runsOn,
      resources: job.spec.resources,
      container: job.spec.container,
      role: job.spec.role,
      ...(job.spec.excludeLabels ? { excludeLabels: canonicalizeLabels(job.spec.excludeLabels) } : {}),
    };
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

  /** Hand one queued job to one agent. False when the job was no longer queued. */
  async assign(job: QueuedJob, agent: ConnectedAgent): Promise<boolean> {
    this.take(job, agent);
    return (await this.claimTaken([{ job, agent }]))[0]!;
  }

  /** The in-memory half of an assignment, done at once so the rest of a pass sees the agent busy. */
  private take(job: QueuedJob, agent: ConnectedAgent): void {
    this.queue.remove(job.id);
    agent.busyJobId = job.id;
    agent.jobsTaken++;
  }

  /** Claim taken jobs in the store (one statement for all) and send each claimed one to its agent. */
  private async claimTaken(pairs: Taken[]): Promise<boolean[]> {
    const jobs = this.opts.store.jobs;
    let specs = new Map<string, unknown>();
    try {
      const ride = this.writes.claimWith(
        pairs.map((p) => ({ jobId: p.job.id, agentId: p.agent.id })),
        this.now(),
        this.opts.instanceId,
      );
      if (ride) specs = await ride;
      else if (pairs.length === 1) {
        const { job, agent } = pairs[0]!;
        const spec = await jobs.claimSpec(job.id, agent.id, this.now(), this.opts.instanceId);
        if (spec !== undefined) specs.set(job.id, spec);
      } else {
        const claims = pairs.map((p) => ({ jobId: p.job.id, agentId: p.agent.id }));
        specs = await jobs.claimMany(claims, this.now(), this.opts.instanceId);
      }
    } catch (err) {
      for (const { job, agent } of pairs) {
        this.log.error({ err: errorMessage(err), jobId: job.id }, 'could not claim job; it stays queued');
        this.settleUncertainClaim(job, agent.id);
      }
    }
    return this.sendWon(pairs, specs);
  }

  /** Send each won claim to its agent; a lost one frees its agent again. True per pair when sent. */
  private async sendWon(pairs: Taken[], specs: Map<string, unknown>): Promise<boolean[]> {
    const sent: boolean[] = [];
    let lost = false;
    for (const { job, agent } of pairs) {
      const spec = specs.get(job.id) as JobSpec | undefined;
      if (!spec) {
        if (agent.busyJobId === job.id) agent.busyJobId = undefined;
        agent.jobsTaken--;
        lost = true;
        sent.push(false);
      } else sent.push(await this.sendClaimed(job, agent, spec));
    }
    // The agents a lost claim freed are looked at again (within a pass: once it is done).
    if (lost) void this.requestPump();
    return sent;
  }

  /** False when the agent left while its claim was in flight (the job is requeued). */
  private async sendClaimed(job: QueuedJob, agent: ConnectedAgent, spec: JobSpec): Promise<boolean> {
    const active: ActiveJob = { job, spec, agentId: agent.id, state: 'dispatched' };
    this.active.set(job.id, active);
    // The agent's connection closed while the claim was in flight: its clean-up ran before this
    // job was active, and the job would stay dispatched to no one. It never saw the job: requeue.
    if (this.registry.get(agent.id) !== agent) {
      await this.requeue(active, `agent ${agent.id} left while the job was being dispatched`);
      return false;
    }
    if (agent.kind === 'scaler') this.opts.scaler?.onJobAssigned(agent.id);
    this.armTimeout(active);
    agent.send({ type: 'job.assign', job: toAssigned(job, spec) });
    this.log.info({ jobId: job.id, agentId: agent.id }, 'job dispatched');
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
        await this.opts.store.jobs.requeue(job.id, agentId);
        return true;
      },
      () => !this.stopped,
      () => undefined, // the outage is already logged by the claim and by /readyz
    ).then((done) => {
      this.uncertain.delete(job.id);
      if (!done) return;
      this.queue.add(job);
      void this.requestPump();
    });
  }

  /**
   * Queued rows this process does not hold: jobs submitted to (or requeued by) another
   * orchestrator on the same database, or a run whose insert committed while its answer was lost
   * to a broken connection. A job held by several instances is harmless: every claim is conditional.
   */
  async resyncQueued(): Promise<number> {
    // Tokens made on another instance give their labels' jobs a reason to wait here too.
    await this.refreshStaticScopes();
    let added = 0;
    for (const row of await this.opts.store.jobs.listQueued()) {
      if (this.queue.get(row.id) || this.active.has(row.id)) continue;
      if (this.uncertain.has(row.id)) continue;
      this.queue.add(toQueued(row));
      added++;
    }
    if (added) {
      this.log.debug({ added }, 'queued jobs taken from the store');
      void this.requestPump();
    }
    return added;
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

  private armTimeout(a: ActiveJob): void {
    const seconds = a.spec.timeoutSeconds;
    if (!seconds) return;
    a.timeoutTimer?.cancel();
    // On the injected clock (tests drive it); a long timeout sleeps in chunks under Node's limit.
    a.timeoutTimer = setLongTimer(
      this.opts.clock,
      seconds * 1000 + (this.opts.timeoutBackstopMs ?? 30_000),
      () => {
        void this.settleActive(a.job.id, 'timed-out', null, `job exceeded its ${seconds}s timeout`, true);
      },
    );
  }

  async onJobStarted(agentId: string, jobId: string): Promise<void> {
    const a = this.active.get(jobId);
    if (!a || a.agentId !== agentId) return;
    if (a.state !== 'running')
      this.opts.observer?.jobStarted(jobId, agentId, a.job.createdAtMs, this.opts.clock.now());
    a.state = 'running';
    const at = this.now();
    const mark = () => this.opts.store.jobs.markRunning(jobId, agentId, at);
    // Not awaited: the agent's next frames (steps, result) join the same group commit, which keeps
    // them in order after this mark.
    void this.writes.running(jobId, agentId, at).catch((err: unknown) => {
      // Left as 'dispatched', a restart would requeue a job that is running: keep trying while it runs.
      this.log.warn({ err: errorMessage(err), jobId }, 'could not mark the job running; retrying');
      void retryWrite(
        async () => (await mark(), true),
        () => !this.stopped && this.active.get(jobId) === a,
        () => undefined,
      );
    });
  }

  /** Step rows go with the group commit; a lost one is logged (the job's result does not depend on it). */
  stepStarted(jobId: string, idx: number, name: string, at: Date): void {
    this.writes
      .stepStarted(jobId, idx, name, at)
      .catch((err: unknown) =>
        this.log.error({ err: errorMessage(err), jobId, idx }, 'could not store a step start'),
      );
  }

  stepFinished(jobId: string, idx: number, exitCode: number | null, timedOut: boolean, at: Date): void {
    this.writes
      .stepFinished(jobId, idx, exitCode, timedOut, at)
      .catch((err: unknown) =>
        this.log.error({ err: errorMessage(err), jobId, idx }, 'could not store a step end'),
      );
  }

  async onJobFinished(
    agentId: string,
    jobId: string,
    result: JobState,
    exitCode: number | null,
    message?: string,
  ): Promise<boolean> {
    const agent = this.registry.get(agentId);
    const a = this.active.get(jobId);
    if (a && a.agentId === agentId) {
      a.reported = true;
      // Not stored: the agent keeps the result (no ack) and stays busy with it until it is.
      if (!(await this.settleActive(jobId, result, exitCode, message ?? null, false))) return false;
    }
    if (agent?.busyJobId === jobId) agent.busyJobId = undefined;
    if (agent && this.registry.isAvailable(agent)) void this.requestPump();
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
    const a = this.active.get(jobId);
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
    const jobId = a.job.id;
    this.logs.jobEnded(jobId); // its held log tail is written with this flush
    await this.logs.flush();
    let done: boolean;
    try {
      // A failure without the agent's word is explained by its failing step and exit code.
      if (state === 'failed' && !reason) {
        await this.writes.flush(); // its step rows may still be pending
        reason = failureReason(await this.opts.store.logs.steps(jobId), exitCode);
      }
      // Resolves once committed with the tick's other writes: only then may the agent be told.
      // In a cluster a peer may have taken the job over (its agent moved there): then it is theirs.
      const owner = this.opts.instanceId;
      // With queued work, the agent's next job rides on this commit: no reason to wait for the tick.
      done = await this.writes.finish(
        jobId,
        state,
        { exitCode, reason, ...(owner !== undefined ? { owner } : {}) },
        this.now(),
        a.reported === true && this.queue.size > 0,
      );
    } catch (err) {
      this.log.error(
        { err: errorMessage(err), jobId, agentId: a.agentId, state, exitCode },
        'could not store the job result; the job stays open',
      );
      return false;
    }
    if (this.active.get(jobId) === a) this.active.delete(jobId);
    a.timeoutTimer?.cancel();
    a.orphanTimer?.cancel();
    if (done) this.log.info({ jobId, agentId: a.agentId, state, exitCode }, 'job finished');
    if (done) this.opts.observer?.jobFinished(jobId, state, this.opts.clock.now());
    if (tellAgent) this.registry.get(a.agentId)?.send({ type: 'job.cancel', jobId, reason: reason ?? state });
    return true;
  }

  /** dispatched → queued again: the agent never started it. */
  async requeue(a: ActiveJob, why: string): Promise<void> {
    // The write comes first: if it fails the job stays active (and cancellable) instead of vanishing.
    let requeued: boolean;
    try {
      requeued = await this.opts.store.jobs.requeue(a.job.id, a.agentId);
    } catch (err) {
      this.log.error(
        { err: errorMessage(err), jobId: a.job.id, agentId: a.agentId, why },
        'could not requeue the job; it stays active',
      );
      return;
    }
    if (this.active.get(a.job.id) === a) this.active.delete(a.job.id);
    a.timeoutTimer?.cancel();
    a.orphanTimer?.cancel();
    if (requeued) {
      a.job.waiting = why;
      this.queue.add(a.job);
      this.log.info({ jobId: a.job.id, agentId: a.agentId, why }, 'job requeued');
    }
  }

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
      if (!(await this.settleActive(jobId, 'cancelled', null, reason, true)))
        throw new Error(`could not store the cancellation of job ${jobId}; it is still open`);
      return 'cancelled';
    }
    return 'not-open';
  }

  /**
   * Clustering: an agent reconnected here while running a job that another instance dispatched
   * (that instance died, or the agent's link moved). The job is taken over if it is still active
   * on this agent (one conditional update: one winner), and its reports are accepted from now on.
   */
  async adoptFromPeer(agentId: string, jobId: string): Promise<boolean> {
    const self = this.opts.instanceId;
    if (!self) return false;
    const seen = await this.opts.store.jobs.get(jobId);
    const from = seen?.owner_instance ?? null;
    if (
      !seen ||
      seen.agent_id !== agentId ||
      from === self ||
      !this.opts.store.jobs.isActiveState(seen.state)
    )
      return false;
    const row = await this.opts.store.jobs.adoptActive(jobId, agentId, { from, to: self }, this.now());
    if (!row) return false;
    const held = this.active.get(jobId);
    if (held?.agentId === agentId) held.state = 'running';
    else {
      const a: ActiveJob = { job: toQueued(row), spec: row.spec as JobSpec, agentId, state: 'running' };
      this.queue.remove(jobId);
      this.active.set(jobId, a);
      this.armTimeout(a);
    }
    this.log.info({ jobId, agentId }, 'took over a job whose agent reconnected here');
    // Cancelled on some instance while its owner was away: carried out now (the agent is told on attach).
    if (row.cancel_requested_at)
      await this.settleActive(jobId, 'cancelled', null, row.cancel_reason ?? 'cancelled by operator', true);
    return true;
  }

  /** Open jobs from the store after a start: queued ones queue again, active ones await their agent. */
  async recover(): Promise<{ queued: number; awaiting: number }> {
    for (const s of await this.opts.store.tokens.staticScopes(this.now()))
      this.noteStaticToken(s.agentId, s.labels, s.expiresAt);
    let queued = 0;
    let awaiting = 0;
    for (const row of await this.opts.store.jobs.listOpen()) {
      const job = toQueued(row);
      if (row.state === 'queued') {
        this.queue.add(job);
        queued++;
      } else if (row.agent_id && this.owns(row)) {
        const a: ActiveJob = {
          job,
          spec: row.spec as JobSpec,
          agentId: row.agent_id,
          state: row.state === 'running' ? 'running' : 'dispatched',
        };
        this.active.set(job.id, a);
        this.armTimeout(a);
        this.orphan(a, 'orchestrator restarted');
        awaiting++;
      }
    }
    return { queued, awaiting };
  }

  /** In a cluster, an active job is this instance's only if it dispatched it (or no one is named). */
  private owns(row: JobRow): boolean {
    const owner = row.owner_instance;
    return !this.opts.instanceId || !owner || owner === this.opts.instanceId;
  }

  /** The agent of an active job is away: wait for it, then settle without running anything twice. */
  orphan(a: ActiveJob, why: string, graceMs = this.opts.reconnectGraceMs ?? 30_000): void {
    a.orphanTimer?.cancel();
    a.orphanTimer = this.opts.clock.setTimer(
      graceMs,
      () =>
        void this.loseJob(a, `${why}; agent ${a.agentId} did not come back`).catch((err: unknown) =>
          this.log.error({ err: errorMessage(err), jobId: a.job.id }, 'could not settle an orphaned job'),
        ),
    );
  }

  async loseJob(a: ActiveJob, why: string): Promise<void> {
    if (this.active.get(a.job.id) !== a) return;
    if (a.state === 'dispatched') await this.requeue(a, why);
    else
      await this.settleActive(
        a.job.id,
        'failed',
        null,
        `${why}; the job was running and is not retried`,
        false,
      );
    void this.requestPump();
  }

  /** Take no new work from now on; resolves once a pass in progress has ended. */
  drain(): Promise<void> {
    this.draining = true;
    return this.idle;
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await this.idle;
    for (const a of this.active.values()) {
      a.timeoutTimer?.cancel();
      a.orphanTimer?.cancel();
    }
    await this.logs.flush();
    await this.writes.flush();
  }
}

export function toQueued(row: JobRow): QueuedJob {
  return {
    id: row.id,
    runId: row.run_id,
    name: row.name,
    seq: Number(row.seq),
    runsOn: row.runs_on,
    spec: routingSpec(row.spec as JobSpec),
    createdAtMs: row.created_at.getTime(),
    ...(row.last_provisioning_error ? { waiting: row.last_provisioning_error } : {}),
  };
}

export function toAssigned(job: QueuedJob, spec: JobSpec): AssignedJob {
  return {
    id: job.id,
    runId: job.runId,
    name: job.name,
    steps: spec.steps.map((s, i) => ({
      name: s.name ?? `step ${i + 1}`,
      run: s.run,
      ...(s.env ? { env: s.env } : {}),
      ...(s.timeoutSeconds ? { timeoutSeconds: s.timeoutSeconds } : {}),
    })),
    env: spec.env ?? {},
    ...(spec.timeoutSeconds ? { timeoutSeconds: spec.timeoutSeconds } : {}),
    ...(spec.container ? { container: spec.container } : {}),
  };
}
