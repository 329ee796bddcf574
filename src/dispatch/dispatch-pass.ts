import type { ScalerManager } from '../scaler/manager.js';
import { PROVISION_IN_FLIGHT } from '../scaler/core/decide.js';
import { describeTable } from '../scaler/core/routing.js';
import type { Store } from '../store/index.js';
import type { Clock } from '../util/clock.js';
import { errorMessage } from '../util/errors.js';
import type { Logger } from '../util/logger.js';
import type { JobObserver } from './active-job.js';
import type { AgentRegistry } from './agent-registry.js';
import type { Claims } from './claims.js';
import { toScaleJob, type planDispatch } from './dispatch-plan.js';
import type { DispatcherOptions } from './dispatcher-options.js';
import type { JobQueue, QueuedJob } from './job-queue.js';
import type { StaticScopes } from './static-scopes.js';

/** Said when a `container:` job finds no agent: which runtime it lacks. */
const CONTAINER_JOB_HINT =
  'a container: job needs an agent that reports kici:runtime:docker or kici:runtime:podman (a Docker or Podman socket on its host) or a container scaler';

export interface DispatchPassDeps {
  store: Store;
  clock: Clock;
  log: Logger;
  queue: JobQueue;
  registry: AgentRegistry;
  claims: Claims;
  scaler?: ScalerManager | undefined;
  /** Static agents that may connect at any time: their jobs wait rather than fail. */
  staticScopes: Pick<StaticScopes, 'could'>;
  observer?: JobObserver | undefined;
  instanceId?: string | undefined;
  scaleClaim?: DispatcherOptions['scaleClaim'];
  peersCould?: DispatcherOptions['peersCould'];
  refreshPeers?: DispatcherOptions['refreshPeers'];
  /** When the dispatcher started: old jobs get a moment for their agents to reconnect. */
  startedAtMs: number;
  /** The decision half of a reconcile (dispatch-plan.ts): groups in order, a decision for each. */
  plan: () => ReturnType<typeof planDispatch>;
  /** Read the static tokens again (a peer may have issued one since). */
  refreshStaticScopes: () => Promise<void>;
  /** Stopping or draining: the rest of the plan is not applied. */
  ending: () => boolean;
  /** The pass left work behind (a claim lost to another orchestrator): run it once more. */
  again: () => void;
}

/**
 * The applying half of a reconcile: the pure planner's decisions for the whole queue turned into
 * claims, scale requests and each group's waiting reason, and a job no one could ever run settled
 * as having no backend. Counts what the passes cost.
 */
export class DispatchPass {
  private readonly cost = { passes: 0, planMs: 0, passMs: 0 };

  constructor(private readonly deps: DispatchPassDeps) {}

  /**
   * Reconcile passes run so far, and the time they took: the synchronous plan over the whole queue
   * (CPU on the event loop) and the whole pass with its claim statements (wall).
   */
  stats(): Readonly<{ passes: number; planMs: number; passMs: number }> {
    return { ...this.cost };
  }

  /** One reconcile: the pure planner decides for the whole queue, then its decisions are applied. */
  async run(): Promise<void> {
    // Nothing queued, nothing to plan: skip listing every idle agent (an agent registering, a
    // result stored, in a fleet of thousands, would each cost a scan of the fleet).
    if (!this.deps.queue.size) return;
    const t0 = performance.now();
    try {
      await this.passOver(t0);
    } finally {
      this.cost.passes++;
      this.cost.passMs += performance.now() - t0;
    }
  }

  private async passOver(t0: number): Promise<void> {
    // One reading for the pass: a token that expires during it is judged on the next.
    const now = this.deps.clock.now();
    const scaler = this.deps.scaler;
    const { groups, plan } = this.deps.plan();
    this.cost.planMs += performance.now() - t0;
    // Jobs being provisioned keep their own reason while their group is given one: listed once per
    // pass (they are few), by group, and joined by those this pass provisions.
    const provisioning = new Map<string, string[]>();
    const noteProvisioning = (id: string) => {
      const key = this.deps.queue.groupOf(id);
      if (key !== undefined) provisioning.set(key, [...(provisioning.get(key) ?? []), id]);
    };
    for (const id of scaler?.provisioningJobs() ?? []) noteProvisioning(id);
    for (const [n, d] of plan.entries()) {
      if (this.deps.ending()) return;
      const group = groups[n]!;
      const taken = this.deps.claims.takeAssigned(d.assign);
      // One claim statement for the group's assignments. A job lost to another orchestrator's
      // claim leaves its agent idle, so look again.
      if (taken.length) for (const ok of await this.deps.claims.claim(taken)) if (!ok) this.deps.again();
      let reason = d.reason;
      for (const sp of d.spawn) {
        const job = this.deps.queue.get(sp.jobId);
        if (!job || !scaler || scaler.isProvisioning(job.id)) continue;
        if (this.deps.scaleClaim) {
          const claim = await this.deps.scaleClaim(job.id).catch((err: unknown) => {
            // Not "someone else has it": nobody may. The job stays queued and the next pass asks again.
            this.deps.log.warn(
              { jobId: job.id, err: errorMessage(err) },
              'could not take the right to provision for a job; will try again',
            );
            job.waiting = `cannot reach the store to provision for it (${errorMessage(err)}); retrying`;
            return 'error' as const;
          });
          if (claim === 'gone') this.deps.queue.remove(job.id);
          if (claim === 'other') job.waiting = 'another orchestrator provisions an agent for it';
          if (claim !== 'mine') continue;
        }
        const r = await scaler.requestScale(toScaleJob(job));
        if (r.action === 'spawning') {
          job.waiting = `provisioning agent ${r.agentId} (scaler "${r.scalerName}")`;
          noteProvisioning(job.id);
        } else if (r.action !== 'skipped' || r.reason !== PROVISION_IN_FLIGHT) {
          reason = r.reason;
          break;
        }
      }
      // Jobs being provisioned keep their own reason; the rest of the group shares one, set once.
      const inFlight = provisioning.get(group.key);
      const keep = inFlight?.filter((id) => scaler?.isProvisioning(id));
      // The group's first job not in flight, read only where it is needed: most groups of a long
      // queue need none of their jobs read.
      const firstLeft = () =>
        inFlight ? firstWhere(group.jobs(), (j) => !scaler?.isProvisioning(j.id)) : group.sample;
      // Held by a cap (not backoff or a missing backend): idle warm stock of another label set
      // may give its room up (warm-pool.ts).
      const capped = d.action === 'at-capacity' || d.action === 'spawn';
      if (scaler && capped && d.match) {
        const first = firstLeft();
        if (first) scaler.yieldWarmFor(toScaleJob(first), d.match);
      }
      // Where no job of the group is in flight, the group's routing facts stand for its first job.
      const left = d.noBackend && (inFlight ? firstLeft() : group.size ? group.facts : undefined);
      if (left) {
        const hint = left.spec.container ? `; ${CONTAINER_JOB_HINT}` : '';
        // An agent that is not bound to one job fits every job of the group alike: one look for all.
        if (this.groupCould(left, now)) {
          this.deps.queue.setGroupReason(group.source, `waiting for a matching agent${hint}`, keep);
          continue;
        }
        const jobsLeft = [...group.jobs()].filter((j) => !scaler?.isProvisioning(j.id));
        const why = scaler
          ? `${d.noBackend}; ${describeTable(scaler.routingTable())}`
          : 'no scaler is configured and no agent token matches these labels';
        // In a cluster a peer may have issued a token, or started with a scaler for these labels,
        // since we last read them: read both again first.
        if (this.deps.instanceId && jobsLeft.some((j) => !this.someoneCould(j))) {
          await this.deps.refreshStaticScopes();
          await this.deps.refreshPeers?.();
        }
        for (const job of jobsLeft) {
          if (this.someoneCould(job)) job.waiting = `waiting for a matching agent${hint}`;
          else await this.settleNoBackend(job, `${why}${hint}`);
        }
      } else if (reason && !d.noBackend) this.deps.queue.setGroupReason(group.source, reason, keep);
    }
  }

  /** Could an agent that takes any job of the job's group run it? Then every job of the group could. */
  private groupCould(job: Pick<QueuedJob, 'runsOn' | 'spec'>, now: number): boolean {
    const scaler = this.deps.scaler;
    return (
      this.deps.registry.anyCould(job, (a) => a.kind !== 'scaler' || !scaler) ||
      this.deps.staticScopes.could(job, now) ||
      (this.deps.peersCould?.(job.runsOn) ?? false)
    );
  }

  private someoneCould(job: QueuedJob): boolean {
    return (
      this.deps.registry.anyCould(job, (a) => this.deps.claims.fits(a.id, job)) ||
      this.deps.staticScopes.could(job, this.deps.clock.now()) ||
      (this.deps.peersCould?.(job.runsOn) ?? false)
    );
  }

  private async settleNoBackend(job: QueuedJob, reason: string): Promise<void> {
    const { clock, queue, startedAtMs } = this.deps;
    // Right after a restart, give operators' agents a moment to reconnect before judging old jobs.
    if (job.createdAtMs < startedAtMs && clock.now() - startedAtMs < 15_000) {
      job.waiting = `waiting for agents to reconnect after restart (${reason})`;
      return;
    }
    queue.remove(job.id);
    let done: boolean;
    try {
      done = await this.deps.store.jobs.finish(
        job.id,
        'no-backend',
        { reason, fromState: 'queued' },
        new Date(clock.now()),
      );
    } catch (err) {
      queue.add(job); // judged again on the next pass
      throw err;
    }
    if (done) this.deps.observer?.jobFinished(job.id, 'no-backend', clock.now());
    this.deps.log.warn({ jobId: job.id, runsOn: job.runsOn, reason }, 'job has no backend');
  }
}

function firstWhere<T>(items: Iterable<T>, test: (item: T) => boolean): T | undefined {
  for (const item of items) if (test(item)) return item;
  return undefined;
}
