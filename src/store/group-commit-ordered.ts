import { sql, type Kysely } from 'kysely';
import type { Batch, Running, Waiter } from './group-commit-sql.js';
import type { JobsRepo } from './jobs-repo.js';
import { storableLine, type LogsRepo } from './logs-repo.js';
import type { Database } from './schema.js';

/**
 * A batch the one-statement form cannot take (a step that ended before it started again, several
 * "running" marks for one job) as an ordered series of statements in the caller's transaction.
 * Returns the jobs whose result was stored; `counted` is called once per statement sent.
 */
export async function writeInOrder(
  trx: Kysely<Database>,
  b: Batch,
  counted: () => void,
): Promise<Set<string>> {
  const steps = [...b.steps.values()];
  const started = steps.filter((s) => s.start);
  const endedBefore = steps.filter((s) => s.endBefore);
  if (endedBefore.length) {
    counted();
    const e = endedBefore.map((s) => s.endBefore!);
    await sql`
      update step_results s set exit_code = v.exit_code, timed_out = v.timed_out, finished_at = v.at
      from unnest(${endedBefore.map((s) => s.jobId)}::text[], ${endedBefore.map((s) => s.idx)}::int[],
        ${e.map((x) => x.exitCode)}::int[], ${e.map((x) => x.timedOut)}::bool[],
        ${e.map((x) => x.at.toISOString())}::timestamptz[]) as v(job_id, idx, exit_code, timed_out, at)
      where s.job_id = v.job_id and s.idx = v.idx`.execute(trx);
  }
  if (started.length) {
    counted();
    // A start and an end seen in one tick make one row; a re-sent start leaves the row alone.
    await sql`
      insert into step_results (job_id, idx, name, exit_code, timed_out, started_at, finished_at)
      select * from unnest(
        ${started.map((s) => s.jobId)}::text[], ${started.map((s) => s.idx)}::int[],
        ${started.map((s) => storableLine(s.start!.name))}::text[],
        ${started.map((s) => s.end?.exitCode ?? null)}::int[],
        ${started.map((s) => s.end?.timedOut ?? false)}::bool[],
        ${started.map((s) => s.start!.at.toISOString())}::timestamptz[],
        ${started.map((s) => s.end?.at.toISOString() ?? null)}::timestamptz[])
      on conflict (job_id, idx) do update set exit_code = excluded.exit_code,
        timed_out = excluded.timed_out, finished_at = excluded.finished_at
        where excluded.finished_at is not null`.execute(trx);
  }
  // A job's single "running" mark folds into its result's row update; several (from different
  // agents, of which at most one is the row's) go first on their own.
  const runsOf = new Map<string, Running[]>();
  for (const r of b.running.values()) runsOf.set(r.jobId, [...(runsOf.get(r.jobId) ?? []), r]);
  const folded = (jobId: string) =>
    b.finishes.has(jobId) && runsOf.get(jobId)?.length === 1 ? runsOf.get(jobId)![0] : undefined;
  const running = [...b.running.values()].filter((r) => !folded(r.jobId));
  if (running.length) {
    counted();
    await sql`
      update jobs j set state = 'running', started_at = v.at
      from unnest(${running.map((r) => r.jobId)}::text[], ${running.map((r) => r.agentId)}::text[],
        ${running.map((r) => r.at.toISOString())}::timestamptz[]) as v(id, agent, at)
      where j.id = v.id and j.agent_id = v.agent and j.state = 'dispatched'`.execute(trx);
  }
  const settled = new Set<string>();
  const fin = [...b.finishes.values()];
  if (fin.length) {
    counted();
    // A "running" mark of the same tick only stamps started_at: the state goes straight to final.
    const run = fin.map((f) => folded(f.jobId));
    const res = await sql<{ id: string }>`
      update jobs j set state = v.state, finished_at = v.at, exit_code = v.exit_code, reason = v.reason,
        started_at = case when v.run_agent is not null and j.state = 'dispatched' and j.agent_id = v.run_agent
          then v.run_at else j.started_at end
      from unnest(${fin.map((f) => f.jobId)}::text[], ${fin.map((f) => f.state)}::text[],
        ${fin.map((f) => f.at.toISOString())}::timestamptz[], ${fin.map((f) => f.fields.exitCode)}::int[],
        ${fin.map((f) => f.fields.reason)}::text[], ${run.map((r) => r?.agentId ?? null)}::text[],
        ${run.map((r) => r?.at.toISOString() ?? null)}::timestamptz[],
        ${fin.map((f) => f.fields.owner ?? null)}::text[])
        as v(id, state, at, exit_code, reason, run_agent, run_at, owner)
      where j.id = v.id and j.state in ('queued', 'dispatched', 'running')
        and (v.owner is null or j.owner_instance is null or j.owner_instance = v.owner)
      returning j.id`.execute(trx);
    for (const r of res.rows) settled.add(r.id);
  }
  return settled;
}

/** The batch failed as a whole: each write on its own, in the batch's order, with its own outcome. */
export async function writeOneByOne(repos: { jobs: JobsRepo; logs: LogsRepo }, b: Batch): Promise<void> {
  const each = async <T>(waiters: Waiter<T>[], write: () => Promise<T>) => {
    try {
      const v = await write();
      for (const w of waiters) w.resolve(v);
    } catch (err) {
      for (const w of waiters) w.reject(err);
    }
  };
  const { jobs, logs } = repos;
  for (const s of b.steps.values())
    await each(s.waiters, async () => {
      if (s.endBefore)
        await logs.stepFinished(s.jobId, s.idx, s.endBefore.exitCode, s.endBefore.timedOut, s.endBefore.at);
      if (s.start) await logs.stepStarted(s.jobId, s.idx, s.start.name, s.start.at);
      if (s.end) await logs.stepFinished(s.jobId, s.idx, s.end.exitCode, s.end.timedOut, s.end.at);
    });
  for (const r of b.running.values())
    await each(r.waiters, async () => void (await jobs.markRunning(r.jobId, r.agentId, r.at)));
  for (const w of b.noops) w.resolve();
  for (const f of b.finishes.values()) {
    const first = f.waiters[0]!;
    await each([first], () => jobs.finish(f.jobId, f.state, f.fields, f.at));
    for (const w of f.waiters.slice(1)) w.resolve(false);
  }
}
