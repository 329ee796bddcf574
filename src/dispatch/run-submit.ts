import { canonicalizeLabels, mirrorResources } from '../config/index.js';
import type { JobSpec, RunSpec } from '../jobs/run-spec.js';
import type { JobRow, Store } from '../store/index.js';
import type { Clock } from '../util/clock.js';
import type { Logger } from '../util/logger.js';
import type { Claims } from './claims.js';
import { routingSpec, type JobQueue, type QueuedJob } from './job-queue.js';
import { newId, toQueued } from './job-rows.js';
import type { Sealed, SealedEnv } from './sealed-env.js';
import type { EarlyProvision } from './early-provision.js';

export interface RunSubmitDeps {
  store: Store;
  clock: Clock;
  log: Logger;
  queue: JobQueue;
  claims: Claims;
  /** Where a run's sealed values are held until its jobs are dispatched (sealed-env.ts). */
  sealed: Pick<SealedEnv, 'hold'>;
  /** Several orchestrators on one database: this instance's id (see DispatcherOptions). */
  instanceId?: string | undefined;
  /** False: every job is queued first and claimed by a dispatch pass (see DispatcherOptions). */
  claimAtSubmit?: boolean | undefined;
  /** Ask for a dispatch pass (jobs were queued). */
  pump: () => void;
  /** A cold start's spawn asked for before the insert, when nothing else is queued (early-provision.ts). */
  early?: Pick<EarlyProvision, 'provision' | 'stored' | 'undo'> | undefined;
}

/**
 * A submitted run stored and its jobs queued, or, when idle agents can take them at once, stored
 * already claimed and sent. This is the head of the path from a submit to a job's first step.
 */
export class RunSubmit {
  constructor(private readonly deps: RunSubmitDeps) {}

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
    const now = new Date(this.deps.clock.now());
    const jobs = Object.entries(spec.jobs).map(([name, js]) => ({
      id: newId('j'),
      name,
      runsOn: canonicalizeLabels(js.runsOn),
      spec: {
        ...js,
        resources: mirrorResources(js.resources),
        // The holder is named so that peers can tell when it is gone (resyncQueued).
        ...(sealedEnv.length
          ? { sealedEnv, ...(this.deps.instanceId && { sealedBy: this.deps.instanceId }) }
          : {}),
      } as JobSpec,
      priority: js.priority ?? spec.priority ?? 0,
      owner: spec.owner ?? null,
    }));
    if (sealed) for (const j of jobs) this.deps.sealed.hold(j.id, sealed);
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
    const taken = this.deps.claimAtSubmit === false ? [] : this.deps.claims.takeNew(queued);
    const claimOf = new Map(taken.map((t) => [t.job.id, t.agent.id]));
    // The jobs no idle agent took: where the planner would start an agent for one, it is asked for
    // now, so the agent boots while the run is stored.
    const early = this.deps.early
      ? await this.deps.early.provision(queued.filter((q) => !claimOf.has(q.id)))
      : [];
    const owner = this.deps.instanceId;
    let rows: JobRow[];
    let durable: () => Promise<void>;
    try {
      const toInsert = jobs.map((j) => {
        const agentId = claimOf.get(j.id);
        return agentId ? { ...j, claim: { agentId, owner } } : j;
      });
      const run = { id: runId, name: spec.name ?? null };
      // The commit's sync waits until the jobs taken at once have left and a pass has been asked
      // for the others (a cold start's spawn among them); the answer waits for it (sync-gate.ts).
      ({ value: rows, durable } = await this.deps.store.jobs.insertRunHeld(run, toInsert, now));
    } catch (err) {
      this.deps.claims.untake(taken);
      await this.deps.early?.undo(early);
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
    this.deps.queue.addMany(toQueue);
    this.deps.early?.stored(early);
    for (const t of taken) t.job.seq = seqOf.get(t.job.id) ?? t.job.seq;
    if (taken.length) await this.deps.claims.sendNew(taken, specs);
    this.deps.log.info({ runId, jobs: rows.length, dispatchedAtOnce: taken.length }, 'run submitted');
    if (rows.length > taken.length) this.deps.pump();
    await durable();
    return { runId, jobs: rows.map((r) => ({ id: r.id, name: r.name })) };
  }
}
