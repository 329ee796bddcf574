/**
 * The jobs repository's queries between instances on one database: taking over a job whose agent
 * reconnected here, and asking the instance that holds a job to cancel it.
 */
import { sql, type Kysely } from 'kysely';
import { ACTIVE, type JobRow } from './jobs-row.js';
import type { Database } from './schema.js';

export async function adoptActive(
  db: Kysely<Database>,
  jobId: string,
  agentId: string,
  move: { from: string | null; to: string },
  now: Date,
): Promise<JobRow | undefined> {
  const from = move.from;
  return db
    .updateTable('jobs')
    .set({ owner_instance: move.to, state: 'running', started_at: sql<Date>`coalesce(started_at, ${now})` })
    .where('id', '=', jobId)
    .where('agent_id', '=', agentId)
    .where('state', 'in', ACTIVE)
    .where((eb) => (from === null ? eb('owner_instance', 'is', null) : eb('owner_instance', '=', from)))
    .returningAll()
    .executeTakeFirst();
}

export async function requestCancel(
  db: Kysely<Database>,
  jobId: string,
  reason: string,
  now: Date,
): Promise<JobRow | undefined> {
  const row = await db
    .updateTable('jobs')
    .set({ cancel_requested_at: now, cancel_reason: reason })
    .where('id', '=', jobId)
    .where('state', 'in', ACTIVE)
    .returningAll()
    .executeTakeFirst();
  if (row) await sql`select pg_notify('kici_job_cancel', ${row.owner_instance ?? ''})`.execute(db);
  return row;
}

export function cancelRequestsFor(
  db: Kysely<Database>,
  owner: string,
): Promise<{ id: string; cancel_reason?: string | null }[]> {
  return db
    .selectFrom('jobs')
    .select(['id', 'cancel_reason'])
    .where('owner_instance', '=', owner)
    .where('state', 'in', ACTIVE)
    .where('cancel_requested_at', 'is not', null)
    .execute();
}
