import { sql, type Kysely } from 'kysely';
import type { Database, JobState } from '../schema.js';
import { TERMINAL_JOB_STATES } from '../schema.js';

/** Only a job in a final state that finished before the cutoff may go; never an open one. */
export function isPrunableJob(row: { state: JobState; finished_at: Date | null }, cutoff: Date): boolean {
  return (
    TERMINAL_JOB_STATES.includes(row.state) &&
    row.finished_at !== null &&
    row.finished_at.getTime() < cutoff.getTime()
  );
}

/** The same test as isPrunableJob, in SQL (the jobs_finished index serves it). */
const prunable = (cutoff: Date) =>
  sql`state in (${sql.join(TERMINAL_JOB_STATES.map((s) => sql.lit(s)))})
      and finished_at is not null and finished_at < ${cutoff.toISOString()}::timestamptz`;

/** Tables holding a job's output, keyed by `job_id`; their rows go after the job's own row. */
const LOG_TABLES = ['job_logs', 'job_log_chunks'] as const;

/** Finished jobs: each batch moves up to `limit` jobs to tombstones; their logs go after. */
export class JobPruner {
  constructor(private readonly db: Kysely<Database>) {}

  /**
   * One short transaction: pick finished jobs (skipping any row another writer holds), delete
   * them and their step rows, and leave a tombstone for each. Returns the ids moved and the step
   * rows deleted (counted like every other table, so the embedded store vacuums them too).
   */
  async pruneBatch(cutoff: Date, now: Date, limit: number): Promise<{ ids: string[]; stepRows: number }> {
    return this.db.transaction().execute(async (trx) => {
      const moved = await sql<{ id: string }>`
        with picked as (
          select id from jobs where ${prunable(cutoff)}
          order by finished_at limit ${limit} for update skip locked
        ), gone as (
          delete from jobs where id in (select id from picked)
          returning id, run_id, name, state, finished_at
        )
        insert into job_tombstones (id, run_id, name, state, finished_at, pruned_at)
        select id, run_id, name, state, finished_at, ${now.toISOString()}::timestamptz from gone
        on conflict (id) do nothing
        returning id`.execute(trx);
      const ids = moved.rows.map((r) => r.id);
      if (!ids.length) return { ids, stepRows: 0 };
      const steps = await sql`delete from step_results where job_id = any(${ids})`.execute(trx);
      return { ids, stepRows: Number(steps.numAffectedRows ?? 0) };
    });
  }

  /**
   * Log rows of tombstoned jobs, `limit` rows a statement, so a job with a huge log never holds
   * a long lock. A tombstone is marked once its logs are gone (a crash half-way just resumes).
   * Returns the log rows deleted per table.
   */
  async pruneLogs(limit: number, signal?: AbortSignal): Promise<Record<string, number>> {
    const counts: Record<string, number> = {};
    for (;;) {
      const pending = await sql<{ id: string }>`
        select id from job_tombstones where not logs_pruned limit ${limit}`.execute(this.db);
      const ids = pending.rows.map((r) => r.id);
      if (!ids.length || signal?.aborted) return counts;
      for (const table of LOG_TABLES) {
        for (;;) {
          if (signal?.aborted) return counts;
          const res = await sql`
            delete from ${sql.table(table)} where ctid = any(array(
              select ctid from ${sql.table(table)} where job_id = any(${ids}) limit ${limit}))`.execute(
            this.db,
          );
          const n = Number(res.numAffectedRows ?? 0);
          counts[table] = (counts[table] ?? 0) + n;
          if (n < limit) break;
        }
      }
      await sql`update job_tombstones set logs_pruned = true where id = any(${ids})`.execute(this.db);
    }
  }

  /** What a prune would remove now: jobs, their step rows and their log rows. */
  async count(cutoff: Date): Promise<Record<string, number>> {
    const rows = async (q: ReturnType<typeof sql>) =>
      Number((await sql<{ n: string }>`${q}`.execute(this.db)).rows[0]!.n);
    const jobs = sql`select id from jobs where ${prunable(cutoff)}`;
    const out: Record<string, number> = {
      jobs: await rows(sql`select count(*) as n from jobs where ${prunable(cutoff)}`),
      step_results: await rows(sql`select count(*) as n from step_results where job_id in (${jobs})`),
    };
    for (const t of LOG_TABLES)
      out[t] = await rows(
        sql`select count(*) as n from ${sql.table(t)} where job_id in (${jobs})
              or job_id in (select id from job_tombstones where not logs_pruned)`,
      );
    return out;
  }

  /** The tombstone of a pruned job, if it still has one. */
  async tombstone(id: string) {
    const r = await sql<{
      id: string;
      run_id: string;
      name: string;
      state: string;
      finished_at: Date | null;
      pruned_at: Date;
    }>`
      select id, run_id, name, state, finished_at, pruned_at from job_tombstones where id = ${id}`.execute(
      this.db,
    );
    return r.rows[0];
  }
}
