import { PROVISION_IN_FLIGHT } from '../scaler/core/decide.js';
import type { ScalerManager } from '../scaler/manager.js';
import type { Clock } from '../util/clock.js';
import type { Logger } from '../util/logger.js';
import { errorMessage } from '../util/errors.js';
import type { AgentRegistry } from './agent-registry.js';
import { planDispatch, toScaleJob } from './dispatch-plan.js';
import { JobQueue, type QueuedJob } from './job-queue.js';

export interface EarlyProvisionDeps {
  queue: Pick<JobQueue, 'size' | 'get'>;
  registry: Pick<AgentRegistry, 'free'>;
  scaler: ScalerManager | undefined;
  clock: Clock;
  log: Logger;
  /** Several orchestrators on one database: the right to provision is taken in the store first. */
  clustered: boolean;
  /** Stopping, draining or holding new work. */
  halted: () => boolean;
  /** A dispatch pass is under way (its decisions were made over a queue this submit is not in). */
  passing: () => boolean;
  /** The longest the insert waits for an early agent's start to be asked for (default LAUNCH_WAIT_MS). */
  launchWaitMs?: number | undefined;
}

/** The longest a submit's insert waits for an early agent's start to be asked for. */
export const LAUNCH_WAIT_MS = 50;

function launchedOrLater(launched: Promise<void> | undefined, waitMs: number): Promise<void> | void {
  if (!launched) return;
  let timer: NodeJS.Timeout | undefined;
  const later = new Promise<void>((r) => (timer = setTimeout(r, waitMs)));
  return Promise.race([launched, later]).finally(() => clearTimeout(timer));
}

/** A spawn asked for before its job was stored. */
export interface EarlySpawn {
  jobId: string;
  agentId: string;
  scalerName: string;
}

/**
 * A cold start's agent asked for before the submit's insert, so its boot runs while the run is
 * stored. Only when nothing else is queued and no pass is under way: the planner's decision over
 * the queue is then its decision over this run's jobs alone, which is what it is asked here, and
 * no older job can lose its place to them. Where an idle agent would take one of them, nothing is
 * done early (the pass after the insert decides, as without this). Single orchestrator only: in a
 * cluster the right to provision is a row of the job's, which does not exist yet.
 *
 * The spawn is bound to a job the store does not hold yet, so only a backend whose launcher undoes a
 * start that was never recorded is asked (`launchesProvisionally`), and what the spawn reports of
 * its job waits until the job is stored (`stored`; scaler/job-reports.ts). If the insert fails,
 * `undo` withdraws the spawn and drops its reports; if the orchestrator dies first, the spawn's
 * record names a job that was never stored, and the next start reclaims its agent instead of
 * adopting it (scaler/recovery.ts).
 */
export class EarlyProvision {
  constructor(private readonly deps: EarlyProvisionDeps) {}

  /** Ask for the spawns the planner would ask for, for these not-yet-stored jobs. */
  async provision(jobs: readonly QueuedJob[]): Promise<EarlySpawn[]> {
    const { scaler } = this.deps;
    if (!scaler || !jobs.length || this.deps.clustered || this.deps.halted()) return [];
    if (this.deps.queue.size || this.deps.passing()) return [];
    const alone = new JobQueue();
    alone.addMany(jobs);
    const { plan } = planDispatch(alone, this.deps.registry.free(), scaler, this.deps.clock.now());
    for (const d of plan.values()) if (d.assign.length) return [];
    const asked: EarlySpawn[] = [];
    for (const d of plan.values()) {
      // Only a start the orchestrator can undo by itself: its job may yet fail to be stored.
      if (!d.spawn.length || !d.match || !scaler.launchesProvisionally(d.match.scalerName)) continue;
      for (const sp of d.spawn) {
        const job = alone.get(sp.jobId);
        if (!job || scaler.isProvisioning(job.id)) continue;
        // What its spawn says of the job (a note, a failed start) waits until the job is stored.
        scaler.holdReports(job.id);
        const r = await scaler.requestScale(toScaleJob(job)).catch((err: unknown) => {
          // The pass after the insert asks again, and reports what it finds.
          this.deps.log.warn(
            { jobId: job.id, err: errorMessage(err) },
            'could not provision early for a job',
          );
          return undefined;
        });
        if (r?.action !== 'spawning') {
          // No spawn, so nothing of it to report.
          scaler.jobStored(job.id, false);
          if (!r) return asked;
          if (r.action !== 'skipped' || r.reason !== PROVISION_IN_FLIGHT) break;
          continue;
        }
        // The run's insert waits until the agent's start is asked for: its statement would
        // otherwise run between the backend's preparation and the start. Not for long: the
        // submit's answer must not hang on a backend that is slow to ask.
        await launchedOrLater(r.launched, this.deps.launchWaitMs ?? LAUNCH_WAIT_MS);
        asked.push({ jobId: job.id, agentId: r.agentId, scalerName: r.scalerName });
      }
    }
    return asked;
  }

  /**
   * The run is stored and its jobs queued: each job whose agent is still on its way says so, and
   * what its spawn reported meanwhile (a failed start) is told now, after that.
   */
  stored(spawns: readonly EarlySpawn[]): void {
    const { scaler, queue } = this.deps;
    for (const e of spawns) {
      const job = queue.get(e.jobId);
      if (job && scaler?.isProvisioning(e.jobId))
        job.waiting = `provisioning agent ${e.agentId} (scaler "${e.scalerName}")`;
      scaler?.jobStored(e.jobId, true);
    }
  }

  /** The run was not stored: the spawns asked for its jobs go, and so does what they reported. */
  async undo(spawns: readonly EarlySpawn[]): Promise<void> {
    if (!spawns.length) return;
    for (const e of spawns) this.deps.scaler?.jobStored(e.jobId, false);
    await this.deps.scaler
      ?.withdrawFor(spawns.map((s) => s.jobId))
      .catch((err: unknown) =>
        this.deps.log.warn(
          { jobs: spawns.map((s) => s.jobId), err: errorMessage(err) },
          'could not withdraw the agents asked for a run that was not stored; they idle out',
        ),
      );
  }
}
