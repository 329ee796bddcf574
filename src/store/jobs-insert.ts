/** The jobs repository's inserts: a submitted run with its jobs, and a new attempt of a finished job. */
import { sql, type Kysely } from 'kysely';
import { runPipelined } from './pglite-dialect.js';
import { OPEN, type JobRow, type NewJob } from './jobs-row.js';
import type { Database } from './schema.js';

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

export async function insertRun(
  db: Kysely<Database>,
  run: { id: string; name: string | null },
  jobs: NewJob[],
  now: Date,
): Promise<JobRow[]> {
  const runRow = { id: run.id, name: run.name, created_at: now };
  // Chunked so that no single statement holds an unbounded run.
  const chunks: NewJob[][] = [];
  for (let i = 0; i < jobs.length; i += 500) chunks.push(jobs.slice(i, i + 500));
  // On the embedded database the run and its jobs go in one call, as one implicit transaction: a
  // submit that idle agents take at once waits for this commit before its assignments leave.
  const piped = await runPipelined(db as Kysely<unknown>, [
    db.insertInto('runs').values(runRow).compile(),
    ...chunks.map((c) => insertJobs(run.id, c, now).compile(db)),
  ]);
  if (piped) return piped.slice(1).flatMap((r) => r.rows as JobRow[]);
  return db.transaction().execute(async (trx) => {
    await trx.insertInto('runs').values(runRow).execute();
    const rows: JobRow[] = [];
    for (const c of chunks) rows.push(...(await insertJobs(run.id, c, now).execute(trx)).rows);
    return rows;
  });
}

export async function insertRetry(
  db: Kysely<Database>,
  jobId: string,
  newId: string,
  now: Date,
): Promise<{ row: JobRow } | { open: JobRow } | undefined> {
  return db.transaction().execute(async (trx) => {
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
