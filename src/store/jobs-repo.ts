import type { Kysely } from 'kysely';
import type { ClaimRequest } from './claim-candidates.js';
import { adoptActive, cancelRequestsFor, requestCancel } from './jobs-cluster.js';
import { insertRetry, insertRun } from './jobs-insert.js';
import { ACTIVE, OPEN, type JobRow, type NewJob } from './jobs-row.js';
import { claimMany, claimSpec, finish, markRunning, requeue, type FinishFields } from './jobs-transitions.js';
import type { Database, JobState } from './schema.js';
import { HeldSync, type HeldWrite } from './sync-gate.js';

// Other modules and tests import the row types from here, where they were first declared.
export type { JobRow, NewJob } from './jobs-row.js';

/** Every job state change is one conditional UPDATE: a job can move only from the state we expect. */
export class JobsRepo {
  constructor(
    private readonly db: Kysely<Database>,
    private readonly held: HeldSync = new HeldSync(db),
  ) {}

  insertRun(run: { id: string; name: string | null }, jobs: NewJob[], now: Date): Promise<JobRow[]> {
    return insertRun(this.db, run, jobs, now);
  }

  /**
   * `insertRun` whose commit's sync is held until `durable()`: a submit's, so that the jobs claimed
   * in it leave, and a pass is asked for the others, before the sync; the answer comes after it.
   */
  insertRunHeld(
    run: { id: string; name: string | null },
    jobs: NewJob[],
    now: Date,
  ): Promise<HeldWrite<JobRow[]>> {
    return this.held.run((db) => insertRun(db, run, jobs, now));
  }

  /**
   * A new attempt of a finished job, queued in the same run with the same spec and name. Refused when
   * the job is still open, or when another attempt of it is: retrying twice must not run it twice.
   */
  insertRetry(
    jobId: string,
    newId: string,
    now: Date,
  ): Promise<{ row: JobRow } | { open: JobRow } | undefined> {
    return insertRetry(this.db, jobId, newId, now);
  }

  /** Which of these job ids the store holds, in any state. */
  async existing(ids: readonly string[]): Promise<Set<string>> {
    if (!ids.length) return new Set();
    const rows = await this.db
      .selectFrom('jobs')
      .select('id')
      .where('id', 'in', [...ids])
      .execute();
    return new Set(rows.map((r) => r.id));
  }

  get(id: string): Promise<JobRow | undefined> {
    return this.db.selectFrom('jobs').selectAll().where('id', '=', id).executeTakeFirst();
  }

  list(filter: { state?: JobState; runId?: string; limit?: number } = {}): Promise<JobRow[]> {
    let q = this.db.selectFrom('jobs').selectAll();
    if (filter.state) q = q.where('state', '=', filter.state);
    if (filter.runId) q = q.where('run_id', '=', filter.runId);
    return q
      .orderBy('seq', 'desc')
      .limit(filter.limit ?? 100)
      .execute();
  }

  listOpen(): Promise<JobRow[]> {
    return this.db.selectFrom('jobs').selectAll().where('state', 'in', OPEN).orderBy('seq').execute();
  }

  /** queued → dispatched for one agent. False when someone else got there first. */
  async claim(jobId: string, agentId: string, now: Date): Promise<boolean> {
    return (await this.claimSpec(jobId, agentId, now)) !== undefined;
  }

  /** Queued jobs in submission order (the shared queue's re-read). */
  listQueued(): Promise<JobRow[]> {
    return this.db.selectFrom('jobs').selectAll().where('state', '=', 'queued').orderBy('seq').execute();
  }

  /**
   * Up to `limit` queued jobs after `afterSeq`, in submission order: a page of the queue, so that
   * a start-up with a million queued jobs never holds every row (and its spec) at once. Served by
   * the (state, seq) index.
   */
  listQueuedPage(afterSeq: number, limit: number): Promise<JobRow[]> {
    return this.db
      .selectFrom('jobs')
      .selectAll()
      .where('state', '=', 'queued')
      .where('seq', '>', String(afterSeq))
      .orderBy('seq')
      .limit(limit)
      .execute();
  }

  /** Dispatched and running jobs (a start-up's other half; they are at most one per agent). */
  listActive(): Promise<JobRow[]> {
    return this.db.selectFrom('jobs').selectAll().where('state', 'in', ACTIVE).orderBy('seq').execute();
  }

  /** Every queued job's id and place, without its spec: what a full re-read compares against. */
  async listQueuedIds(): Promise<{ id: string; seq: number }[]> {
    const rows = await this.db
      .selectFrom('jobs')
      .select(['id', 'seq'])
      .where('state', '=', 'queued')
      .orderBy('seq')
      .execute();
    return rows.map((r) => ({ id: r.id, seq: Number(r.seq) }));
  }

  /** The jobs among `ids` that are still queued, in submission order. */
  async listQueuedByIds(ids: readonly string[]): Promise<JobRow[]> {
    const out: JobRow[] = [];
    for (let i = 0; i < ids.length; i += 1000) {
      const chunk = ids.slice(i, i + 1000);
      out.push(
        ...(await this.db
          .selectFrom('jobs')
          .selectAll()
          .where('id', 'in', chunk)
          .where('state', '=', 'queued')
          .orderBy('seq')
          .execute()),
      );
    }
    return out.sort((a, b) => Number(a.seq) - Number(b.seq));
  }

  /** Like `claim`, returning the job's full spec (steps, env) in the same statement. */
  claimSpec(jobId: string, agentId: string, now: Date, owner?: string): Promise<unknown> {
    return claimSpec(this.db, jobId, agentId, now, owner);
  }

  /** `claimSpec` whose commit's sync is held until `durable()`, so the job can leave before it. */
  claimSpecHeld(jobId: string, agentId: string, now: Date, owner?: string): Promise<HeldWrite<unknown>> {
    return this.held.run((db) => claimSpec(db, jobId, agentId, now, owner));
  }

  /**
   * `claimSpec` for several jobs in one statement (a dispatch pass that fills several idle agents):
   * each job still moves only from 'queued', so a job another instance took is simply not returned.
   * A claim with alternates takes the first of its jobs still queued (`ClaimRequest`).
   */
  claimMany(claims: readonly ClaimRequest[], now: Date, owner?: string): Promise<Map<string, unknown>> {
    return claimMany(this.db, claims, now, owner);
  }

  markRunning(jobId: string, agentId: string, now: Date): Promise<boolean> {
    return markRunning(this.db, jobId, agentId, now);
  }

  /** dispatched → queued: the agent never started it, so it is safe to offer again. */
  requeue(jobId: string, agentId: string): Promise<boolean> {
    return requeue(this.db, jobId, agentId);
  }

  /** Settle a job that is not yet final. Returns false when it already was. */
  finish(jobId: string, state: JobState, fields: FinishFields, now: Date): Promise<boolean> {
    return finish(this.db, jobId, state, fields, now);
  }

  /**
   * Clustering: an agent that was running this job for another instance is now connected to
   * `to`. One conditional update moves the job from the owner the caller read (`from`) to `to`,
   * only while it is still active on that same agent: of several instances that read the same
   * owner and try at once, exactly one wins. The agent is running it, so a row still marked
   * dispatched (its "started" was lost with the old owner) becomes running.
   */
  adoptActive(
    jobId: string,
    agentId: string,
    move: { from: string | null; to: string },
    now: Date,
  ): Promise<JobRow | undefined> {
    return adoptActive(this.db, jobId, agentId, move, now);
  }

  /**
   * Clustering: ask the instance that holds an active job to cancel it. The request stays on the
   * row (its owner finds it on its next poll even if the notification is lost), and NOTIFY
   * `kici_job_cancel` wakes the owner at once. Undefined when the job is not active.
   */
  requestCancel(jobId: string, reason: string, now: Date): Promise<JobRow | undefined> {
    return requestCancel(this.db, jobId, reason, now);
  }

  /** Active jobs of `owner` that an instance was asked to cancel. */
  cancelRequestsFor(owner: string): Promise<{ id: string; cancel_reason?: string | null }[]> {
    return cancelRequestsFor(this.db, owner);
  }

  async setProvisioningError(jobId: string, message: string): Promise<void> {
    await this.db
      .updateTable('jobs')
      .set({ last_provisioning_error: message })
      .where('id', '=', jobId)
      .where('state', '=', 'queued')
      .execute();
  }

  async markLogTruncated(jobId: string): Promise<void> {
    await this.db.updateTable('jobs').set({ log_truncated: true }).where('id', '=', jobId).execute();
  }

  async countByState(runId?: string): Promise<Record<string, number>> {
    let q = this.db.selectFrom('jobs').select(['state', (eb) => eb.fn.countAll<string>().as('n')]);
    if (runId) q = q.where('run_id', '=', runId);
    const rows = await q.groupBy('state').execute();
    return Object.fromEntries(rows.map((r) => [r.state, Number(r.n)]));
  }

  isActiveState(state: JobState): boolean {
    return ACTIVE.includes(state);
  }
}
