import { sql, type CompiledQuery, type Kysely } from 'kysely';
import type { Batch, ClaimRows, CommitOutcome, Running } from './group-commit-sql.js';
import { storableLine } from './logs-repo.js';
import { runPipelined } from './pglite-dialect.js';
import type { Database } from './schema.js';

/**
 * A group commit on the embedded database: one small statement per row, all sent in one call and
 * committed as one implicit transaction. Each statement is prepared once and runs on a cached
 * plan, so a batch of one job (its steps, result and the next job's claim) costs about a third of
 * the single statement `commitAsOneStatement` sends to PostgreSQL, whose CTEs over arrays are
 * planned afresh on every run; there, one statement saves the round trips, which cost more.
 *
 * The statements run in order and each sees the ones before it, so any batch fits (no "simple"
 * shape needed): step ends for earlier rows, step starts, "running" marks, results, then claims.
 * Undefined when `db` is not on PGlite. Compiled through Kysely, so its plugins see every statement.
 * A claim's alternates are not offered here: the embedded database has one orchestrator, and no
 * peer takes a job from under it.
 */
export async function commitAsPipeline(
  db: Kysely<Database>,
  b: Batch,
  c?: ClaimRows,
): Promise<CommitOutcome | undefined> {
  const q: CompiledQuery[] = [];
  const steps = [...b.steps.values()];
  for (const s of steps)
    if (s.endBefore)
      q.push(
        sql`update step_results set exit_code = ${s.endBefore.exitCode}::int, timed_out = ${s.endBefore.timedOut}::bool,
          finished_at = ${s.endBefore.at.toISOString()}::timestamptz where job_id = ${s.jobId} and idx = ${s.idx}::int`.compile(
          db,
        ),
      );
  for (const s of steps)
    if (s.start)
      q.push(
        // A start and an end seen in one batch make one row; a re-sent start leaves the row alone.
        sql`insert into step_results (job_id, idx, name, exit_code, timed_out, started_at, finished_at)
          values (${s.jobId}, ${s.idx}::int, ${storableLine(s.start.name)}, ${s.end?.exitCode ?? null}::int,
            ${s.end?.timedOut ?? false}::bool, ${s.start.at.toISOString()}::timestamptz,
            ${s.end?.at.toISOString() ?? null}::timestamptz)
          on conflict (job_id, idx) do update set exit_code = excluded.exit_code,
            timed_out = excluded.timed_out, finished_at = excluded.finished_at
            where excluded.finished_at is not null`.compile(db),
      );
  // A job's single "running" mark folds into its result's row update (as in GroupCommit's
  // transaction); several (from different agents, at most one of them the row's) go on their own.
  const marks = new Map<string, Running[]>();
  for (const r of b.running.values()) marks.set(r.jobId, [...(marks.get(r.jobId) ?? []), r]);
  const folded = (jobId: string) =>
    b.finishes.has(jobId) && marks.get(jobId)?.length === 1 ? marks.get(jobId)![0] : undefined;
  for (const r of b.running.values())
    if (!folded(r.jobId))
      q.push(
        sql`update jobs set state = 'running', started_at = ${r.at.toISOString()}::timestamptz
          where id = ${r.jobId} and agent_id = ${r.agentId} and state = 'dispatched'`.compile(db),
      );
  const fin = [...b.finishes.values()];
  for (const f of fin) {
    const run = folded(f.jobId);
    q.push(
      sql`update jobs set state = ${f.state}, finished_at = ${f.at.toISOString()}::timestamptz,
        exit_code = ${f.fields.exitCode}::int, reason = ${f.fields.reason}::text,
        started_at = case when ${run?.agentId ?? null}::text is not null and state = 'dispatched'
          and agent_id = ${run?.agentId ?? null}::text then ${run?.at.toISOString() ?? null}::timestamptz
          else started_at end
        where id = ${f.jobId} and state in ('queued', 'dispatched', 'running')
          and (${f.fields.owner ?? null}::text is null or owner_instance is null
            or owner_instance = ${f.fields.owner ?? null}::text)
        returning id`.compile(db),
    );
  }
  const claims = c?.jobId ?? [];
  claims.forEach((jobId, i) =>
    q.push(
      sql`update jobs set state = 'dispatched', agent_id = ${c!.agentId[i]!}, dispatched_at = ${c!.at}::timestamptz,
        attempts = attempts + 1, owner_instance = coalesce(${c!.owner}::text, owner_instance)
        where id = ${jobId} and state = 'queued'
        returning id, spec`.compile(db),
    ),
  );
  const out: CommitOutcome = { settled: new Set(), claimed: new Map() };
  if (!q.length) return out;
  const res = await runPipelined(db as Kysely<unknown>, q);
  if (!res) return undefined;
  const first = res.length - claims.length - fin.length;
  fin.forEach((f, i) => {
    if (res[first + i]!.rows.length) out.settled.add(f.jobId);
  });
  claims.forEach((jobId, i) => {
    const row = res[first + fin.length + i]!.rows[0] as { spec: unknown } | undefined;
    if (row) out.claimed.set(jobId, row.spec);
  });
  return out;
}
