import { sql, type Kysely, type Selectable } from 'kysely';
import { runPipelined } from './pglite-dialect.js';
import type { Database, JobState, JobsTable } from './schema.js';

export type JobRow = Selectable<JobsTable>;

export interface NewJob {
  id: string;
  name: string;
  runsOn: string[];
  spec: unknown;
  /** Claimed by an idle agent as it is submitted: stored already dispatched, in the same commit. */
  claim?: { agentId: string; owner?: string | undefined } | undefined;
  priority?: number;
  owner?: string | null;
}

const ACTIVE: JobState[] = ['dispatched', 'running'];

/**
 * Inserts a chunk of a run's jobs as one statement whose text never changes: the rows travel as
 * one array per column. A multi-row VALUES list cost the query builder a node per value (13 per
 * job) on every submit, and its text changed with the row count, so no plan could be kept.
 * JSON goes as text and is cast per row: an array of JSON documents as a parameter would have its
 * elements encoded again by a client that serializes by type. Rows are inserted, and numbered,
 * in the order given.
 */
function insertJobs(runId: string, jobs: NewJob[], now: Date) {
  const at = now.toISOString();
  const col = <T>(f: (j: NewJob) => T) => jobs.map(f);
  return sql<JobRow>`
    insert into jobs (id, run_id, name, runs_on, spec, priority, owner, created_at, state, agent_id,
      dispatched_at, attempts, owner_instance)
    select v.id, ${runId}::text, v.name, v.runs_on::jsonb, v.spec::jsonb, v.priority, v.owner,
      ${at}::timestamptz, v.state, v.agent_id, v.dispatched_at, v.attempts, v.owner_instance
    from unnest(${col((j) => j.id)}::text[], ${col((j) => j.name)}::text[],
      ${col((j) => JSON.stringify(j.runsOn))}::text[], ${col((j) => JSON.stringify(j.spec))}::text[],
      ${col((j) => j.priority ?? 0)}::int[], ${col((j) => j.owner ?? null)}::text[],
      ${col((j) => (j.claim ? 'dispatched' : 'queued'))}::text[], ${col((j) => j.claim?.agentId ?? null)}::text[],
      ${col((j) => (j.claim ? at : null))}::timestamptz[], ${col((j) => (j.claim ? 1 : 0))}::int[],
      ${col((j) => j.claim?.owner ?? null)}::text[])
      with ordinality as v(id, name, runs_on, spec, priority, owner, state, agent_id, dispatched_at,
        attempts, owner_instance, ord)
    order by v.ord
    returning *`;
}
const OPEN: JobState[] = ['queued', 'dispatched', 'running'];

/** Every job state change is one conditional UPDATE: a job can move only from the state we expect. */
export class JobsRepo {
  constructor(private readonly db: Kysely<Database>) {}

  async insertRun(run: { id: string; name: string | null }, jobs: NewJob[], now: Date): Promise<JobRow[]> {
    const runRow = { id: run.id, name: run.name, created_at: now };
    // Chunked so that no single statement holds an unbounded run.
    const chunks: NewJob[][] = [];
    for (let i = 0; i < jobs.length; i += 500) chunks.push(jobs.slice(i, i + 500));
    // On the embedded database the run and its jobs go in one call, as one implicit transaction: a
    // submit that idle agents take at once waits for this commit before its assignments leave.
    const piped = await runPipelined(this.db as Kysely<unknown>, [
      this.db.insertInto('runs').values(runRow).compile(),
      ...chunks.map((c) => insertJobs(run.id, c, now).compile(this.db)),
    ]);
    if (piped) return piped.slice(1).flatMap((r) => r.rows as JobRow[]);
    return this.db.transaction().execute(async (trx) => {
      await trx.insertInto('runs').values(runRow).execute();
      const rows: JobRow[] = [];
      for (const c of chunks) rows.push(...(await insertJobs(run.id, c, now).execute(trx)).rows);
      return rows;
    });
  }

  /**
   * A new attempt of a finished job, queued in the same run with the same spec and name. Refused when
   * the job is still open, or when another attempt of it is: retrying twice must not run it twice.
   */
  async insertRetry(
    jobId: string,
    newId: string,
    now: Date,
  ): Promise<{ row: JobRow } | { open: JobRow } | undefined> {
    return this.db.transaction().execute(async (trx) => {
      const prev = await trx.selectFrom('jobs').selectAll().where('id', '=', jobId).executeTakeFirst();
      if (!prev) return undefined;
      const siblings = await trx
        .selectFrom('jobs')
        .selectAll()
        .where('run_id', '=', prev.run_id)
        .where('name', '=', prev.name)
        .execute();
      const open = siblings.find((j) => OPEN.includes(j.state));
      if (open) return { open };
      const attempt = Math.max(...siblings.map((j) => j.attempt)) + 1;
      const row = await trx
        .insertInto('jobs')
        .values({
          id: newId,
          run_id: prev.run_id,
          name: prev.name,
          state: 'queued',
          runs_on: JSON.stringify(prev.runs_on),
          spec: JSON.stringify(prev.spec),
          priority: prev.priority,
          owner: prev.owner,
          attempt,
          retry_of: prev.id,
          created_at: now,
        })
        .returningAll()
        .executeTakeFirstOrThrow();
      return { row };
    });
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
  async claimSpec(jobId: string, agentId: string, now: Date, owner?: string): Promise<unknown> {
    const row = await this.db
      .updateTable('jobs')
      .set({
        state: 'dispatched',
        agent_id: agentId,
        dispatched_at: now,
        attempts: sql`attempts + 1`,
        ...(owner !== undefined ? { owner_instance: owner } : {}),
      })
      .where('id', '=', jobId)
      .where('state', '=', 'queued')
      .returning('spec')
      .executeTakeFirst();
    return row?.spec;
  }

  /**
   * `claimSpec` for several jobs in one statement (a dispatch pass that fills several idle agents):
   * each job still moves only from 'queued', so a job another instance took is simply not returned.
   */
  async claimMany(
    claims: { jobId: string; agentId: string }[],
    now: Date,
    owner?: string,
  ): Promise<Map<string, unknown>> {
    const res = await sql<{ id: string; spec: unknown }>`
      update jobs j set state = 'dispatched', agent_id = v.agent, dispatched_at = ${now.toISOString()}::timestamptz,
        attempts = j.attempts + 1, owner_instance = coalesce(${owner ?? null}::text, j.owner_instance)
      from unnest(${claims.map((c) => c.jobId)}::text[], ${claims.map((c) => c.agentId)}::text[]) as v(id, agent)
      where j.id = v.id and j.state = 'queued'
      returning j.id, j.spec`.execute(this.db);
    return new Map(res.rows.map((r) => [r.id, r.spec]));
  }

  async markRunning(jobId: string, agentId: string, now: Date): Promise<boolean> {
    const res = await this.db
      .updateTable('jobs')
      .set({ state: 'running', started_at: now })
      .where('id', '=', jobId)
      .where('agent_id', '=', agentId)
      .where('state', '=', 'dispatched')
      .executeTakeFirst();
    return res.numUpdatedRows === 1n;
  }

  /** dispatched → queued: the agent never started it, so it is safe to offer again. */
  async requeue(jobId: string, agentId: string): Promise<boolean> {
    const res = await this.db
      .updateTable('jobs')
      .set({ state: 'queued', agent_id: null, dispatched_at: null })
      .where('id', '=', jobId)
      .where('agent_id', '=', agentId)
      .where('state', '=', 'dispatched')
      .executeTakeFirst();
    return res.numUpdatedRows === 1n;
  }

  /** Settle a job that is not yet final. Returns false when it already was. */
  async finish(
    jobId: string,
    state: JobState,
    fields: {
      exitCode?: number | null;
      reason?: string | null;
      agentId?: string;
      fromState?: JobState;
      /** Clustering: only while this instance (or no one) owns the job; a peer may have taken it over. */
      owner?: string;
    },
    now: Date,
  ): Promise<boolean> {
    let q = this.db
      .updateTable('jobs')
      .set({
        state,
        finished_at: now,
        ...(fields.exitCode !== undefined ? { exit_code: fields.exitCode } : {}),
        ...(fields.reason !== undefined ? { reason: fields.reason } : {}),
      })
      .where('id', '=', jobId)
      .where('state', 'in', OPEN);
    if (fields.agentId) q = q.where('agent_id', '=', fields.agentId);
    // Another orchestrator may hold the job now: a judgement about a queued job applies only while queued.
    if (fields.fromState) q = q.where('state', '=', fields.fromState);
    const owner = fields.owner;
    if (owner !== undefined)
      q = q.where((eb) => eb.or([eb('owner_instance', '=', owner), eb('owner_instance', 'is', null)]));
    const res = await q.executeTakeFirst();
    return res.numUpdatedRows === 1n;
  }

  /**
   * Clustering: an agent that was running this job for another instance is now connected to
   * `to`. One conditional update moves the job from the owner the caller read (`from`) to `to`,
   * only while it is still active on that same agent: of several instances that read the same
   * owner and try at once, exactly one wins. The agent is running it, so a row still marked
   * dispatched (its "started" was lost with the old owner) becomes running.
   */
  async adoptActive(
    jobId: string,
    agentId: string,
    move: { from: string | null; to: string },
    now: Date,
  ): Promise<JobRow | undefined> {
    const from = move.from;
    return this.db
      .updateTable('jobs')
      .set({ owner_instance: move.to, state: 'running', started_at: sql<Date>`coalesce(started_at, ${now})` })
      .where('id', '=', jobId)
      .where('agent_id', '=', agentId)
      .where('state', 'in', ACTIVE)
      .where((eb) => (from === null ? eb('owner_instance', 'is', null) : eb('owner_instance', '=', from)))
      .returningAll()
      .executeTakeFirst();
  }

  /**
   * Clustering: ask the instance that holds an active job to cancel it. The request stays on the
   * row (its owner finds it on its next poll even if the notification is lost), and NOTIFY
   * `kici_job_cancel` wakes the owner at once. Undefined when the job is not active.
   */
  async requestCancel(jobId: string, reason: string, now: Date): Promise<JobRow | undefined> {
    const row = await this.db
      .updateTable('jobs')
      .set({ cancel_requested_at: now, cancel_reason: reason })
      .where('id', '=', jobId)
      .where('state', 'in', ACTIVE)
      .returningAll()
      .executeTakeFirst();
    if (row) await sql`select pg_notify('kici_job_cancel', ${row.owner_instance ?? ''})`.execute(this.db);
    return row;
  }

  /** Active jobs of `owner` that an instance was asked to cancel. */
  cancelRequestsFor(owner: string): Promise<{ id: string; cancel_reason?: string | null }[]> {
    return this.db
      .selectFrom('jobs')
      .select(['id', 'cancel_reason'])
      .where('owner_instance', '=', owner)
      .where('state', 'in', ACTIVE)
      .where('cancel_requested_at', 'is not', null)
      .execute();
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
