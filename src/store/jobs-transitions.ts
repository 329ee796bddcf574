/**
 * The jobs repository's state changes along a job's own life: claimed, running, handed back,
 * settled. Each is one conditional UPDATE, so a job moves only from the state the caller expects
 * and of two racing callers exactly one wins.
 */
import { sql, type Kysely } from 'kysely';
import { candidatesOf, claimSource, type ClaimRequest } from './claim-candidates.js';
import { OPEN } from './jobs-row.js';
import type { Database, JobState } from './schema.js';

export async function claimSpec(
  db: Kysely<Database>,
  jobId: string,
  agentId: string,
  now: Date,
  owner?: string,
): Promise<unknown> {
  const row = await db
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

export async function claimMany(
  db: Kysely<Database>,
  claims: readonly ClaimRequest[],
  now: Date,
  owner?: string,
): Promise<Map<string, unknown>> {
  const res = await sql<{ id: string; spec: unknown }>`
    update jobs j set state = 'dispatched', agent_id = v.agent, dispatched_at = ${now.toISOString()}::timestamptz,
      attempts = j.attempts + 1, owner_instance = coalesce(${owner ?? null}::text, j.owner_instance)
    from ${claimSource(
      claims.map((c) => c.jobId),
      claims.map((c) => c.agentId),
      candidatesOf(claims),
    )}
    where j.id = v.id and j.state = 'queued'
    returning j.id, j.spec`.execute(db);
  return new Map(res.rows.map((r) => [r.id, r.spec]));
}

export async function markRunning(
  db: Kysely<Database>,
  jobId: string,
  agentId: string,
  now: Date,
): Promise<boolean> {
  const res = await db
    .updateTable('jobs')
    .set({ state: 'running', started_at: now })
    .where('id', '=', jobId)
    .where('agent_id', '=', agentId)
    .where('state', '=', 'dispatched')
    .executeTakeFirst();
  return res.numUpdatedRows === 1n;
}

export async function requeue(db: Kysely<Database>, jobId: string, agentId: string): Promise<boolean> {
  const res = await db
    .updateTable('jobs')
    .set({ state: 'queued', agent_id: null, dispatched_at: null })
    .where('id', '=', jobId)
    .where('agent_id', '=', agentId)
    .where('state', '=', 'dispatched')
    .executeTakeFirst();
  return res.numUpdatedRows === 1n;
}

/** What may narrow a settle beyond "still open" (see JobsRepo.finish). */
export interface FinishFields {
  exitCode?: number | null;
  reason?: string | null;
  agentId?: string;
  fromState?: JobState;
  /** Clustering: only while this instance (or no one) owns the job; a peer may have taken it over. */
  owner?: string;
}

export async function finish(
  db: Kysely<Database>,
  jobId: string,
  state: JobState,
  fields: FinishFields,
  now: Date,
): Promise<boolean> {
  let q = db
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
