import { sql, type Kysely, type RawBuilder } from 'kysely';
import { claimSource, type Candidates } from './claim-candidates.js';
import { storableLine } from './logs-repo.js';
import { prepared } from './pg-prepared.js';
import type { Database, JobState } from './schema.js';

/** What a job's final write sets; the same fields `JobsRepo.finish` takes from a result. */
export interface FinishFields {
  exitCode: number | null;
  reason: string | null;
  /** Clustering: only while this instance (or no one) owns the job; a peer may have taken it over. */
  owner?: string;
}

export interface Waiter<T> {
  resolve(v: T): void;
  reject(e: unknown): void;
}

export interface Running {
  jobId: string;
  agentId: string;
  at: Date;
  /** When it goes out at the latest (performance.now() time), with or without its job's result. */
  due: number;
  waiters: Waiter<void>[];
}
export interface StepEnd {
  exitCode: number | null;
  timedOut: boolean;
  at: Date;
}
export interface Step {
  jobId: string;
  idx: number;
  /** An end seen before any start of this tick: it applies to a row an earlier tick wrote. */
  endBefore?: StepEnd;
  start?: { name: string; at: Date };
  end?: StepEnd;
  /** As Running.due: from the first write of this step in the batch. */
  due: number;
  waiters: Waiter<void>[];
}
export interface Finish {
  jobId: string;
  state: JobState;
  fields: FinishFields;
  at: Date;
  waiters: Waiter<boolean>[];
}

export interface Batch {
  /** By job and agent: only the agent the row names can move it, so one entry per pair is enough. */
  running: Map<string, Running>;
  steps: Map<string, Step>;
  finishes: Map<string, Finish>;
  /** Writes known to change nothing (a "running" after the job's result): resolved with the commit. */
  noops: Waiter<void>[];
}

/** Rows of one group commit, column by column (each list as long as its part's row count). */
export interface CommitRows {
  /** Step ends for rows an earlier tick wrote. */
  ends: { jobId: string[]; idx: number[]; exitCode: (number | null)[]; timedOut: boolean[]; at: string[] };
  /** Step starts (with their end when it came in the same tick). */
  starts: {
    jobId: string[];
    idx: number[];
    name: string[];
    exitCode: (number | null)[];
    timedOut: boolean[];
    at: string[];
    endAt: (string | null)[];
  };
  /** dispatched → running, for jobs without a result in this tick. */
  running: { jobId: string[]; agentId: string[]; at: string[] };
  /** Results; runAgent/runAt carry a "running" mark of the same tick, folded into the row update. */
  finishes: {
    jobId: string[];
    state: string[];
    at: string[];
    exitCode: (number | null)[];
    reason: (string | null)[];
    runAgent: (string | null)[];
    runAt: (string | null)[];
    /** Per result: the instance that must own the row (null: no owner check). */
    owner: (string | null)[];
  };
}

/** Claims riding on a group commit: queued → dispatched, as `JobsRepo.claimMany`. */
export interface ClaimRows {
  jobId: string[];
  agentId: string[];
  /** With alternates (a cluster): each agent takes the first of its candidates still queued. */
  candidates: Candidates | undefined;
  at: string;
  owner: string | null;
}

export interface CommitOutcome {
  /** Jobs the results settled. */
  settled: Set<string>;
  /** Claimed jobs and their specs. */
  claimed: Map<string, unknown>;
}

/**
 * A whole group commit as ONE statement: its parts are data-modifying CTEs, which PostgreSQL runs
 * to completion whether read or not, atomically as a statement is. The text does not grow with the
 * batch (the rows travel as arrays), and on the embedded database a statement's fixed cost is most
 * of a small write, so one statement instead of a transaction of five is the point.
 * The caller ensures no two parts touch the same row (one snapshot serves all of them); claims
 * touch queued rows, which no other part of a batch does.
 */
export async function commitAsOneStatement(
  db: Kysely<Database>,
  r: CommitRows,
  c?: ClaimRows,
): Promise<CommitOutcome> {
  const { ends: e, starts: s, running: u, finishes: f } = r;
  // Only the parts with rows: planning a part costs even when its arrays are empty.
  const parts: RawBuilder<unknown>[] = [];
  if (e.jobId.length)
    parts.push(sql`step_ends as (
      update step_results s set exit_code = v.exit_code, timed_out = v.timed_out, finished_at = v.at
      from unnest(${e.jobId}::text[], ${e.idx}::int[], ${e.exitCode}::int[], ${e.timedOut}::bool[],
        ${e.at}::timestamptz[]) as v(job_id, idx, exit_code, timed_out, at)
      where s.job_id = v.job_id and s.idx = v.idx)`);
  if (s.jobId.length)
    parts.push(sql`step_starts as (
      insert into step_results (job_id, idx, name, exit_code, timed_out, started_at, finished_at)
      select * from unnest(${s.jobId}::text[], ${s.idx}::int[], ${s.name}::text[], ${s.exitCode}::int[],
        ${s.timedOut}::bool[], ${s.at}::timestamptz[], ${s.endAt}::timestamptz[])
      on conflict (job_id, idx) do update set exit_code = excluded.exit_code,
        timed_out = excluded.timed_out, finished_at = excluded.finished_at
        where excluded.finished_at is not null)`);
  if (u.jobId.length)
    parts.push(sql`running as (
      update jobs j set state = 'running', started_at = v.at
      from unnest(${u.jobId}::text[], ${u.agentId}::text[], ${u.at}::timestamptz[]) as v(id, agent, at)
      where j.id = v.id and j.agent_id = v.agent and j.state = 'dispatched')`);
  if (f.jobId.length)
    parts.push(sql`results as (
      update jobs j set state = v.state, finished_at = v.at, exit_code = v.exit_code, reason = v.reason,
        started_at = case when v.run_agent is not null and j.state = 'dispatched' and j.agent_id = v.run_agent
          then v.run_at else j.started_at end
      from unnest(${f.jobId}::text[], ${f.state}::text[], ${f.at}::timestamptz[], ${f.exitCode}::int[],
        ${f.reason}::text[], ${f.runAgent}::text[], ${f.runAt}::timestamptz[], ${f.owner}::text[])
        as v(id, state, at, exit_code, reason, run_agent, run_at, owner)
      where j.id = v.id and j.state in ('queued', 'dispatched', 'running')
        and (v.owner is null or j.owner_instance is null or j.owner_instance = v.owner)
      returning j.id)`);
  if (c?.jobId.length)
    parts.push(sql`claims as (
      update jobs j set state = 'dispatched', agent_id = v.agent, dispatched_at = ${c.at}::timestamptz,
        attempts = j.attempts + 1, owner_instance = coalesce(${c.owner}::text, j.owner_instance)
      from ${claimSource(c.jobId, c.agentId, c.candidates)}
      where j.id = v.id and j.state = 'queued'
      returning j.id, j.spec)`);
  const out: CommitOutcome = { settled: new Set(), claimed: new Map() };
  if (!parts.length) return out;
  const selects = [
    ...(f.jobId.length ? [sql`select id, null::jsonb as spec, false as claim from results`] : []),
    ...(c?.jobId.length ? [sql`select id, spec, true as claim from claims`] : []),
  ];
  const main = selects.length
    ? sql.join(selects, sql` union all `)
    : sql`select null::text as id, null::jsonb as spec, false as claim where false`;
  const q = sql<{
    id: string;
    spec: unknown;
    claim: boolean;
  }>`with ${sql.join(parts, sql`, `)} ${main}`.compile(db);
  // Its text depends only on which parts have rows (a few shapes): on PostgreSQL each shape is a
  // named prepared statement, so a job's commit sends no SQL text and is not planned afresh.
  prepared(q.sql);
  const res = await db.executeQuery(q);
  for (const x of res.rows) {
    if (x.claim) out.claimed.set(x.id, x.spec);
    else out.settled.add(x.id);
  }
  return out;
}

/** A batch's rows as the columns of the one statement (a tick's usual shape, see GroupCommit.simple). */
export function rowsOf(b: Batch): CommitRows {
  const steps = [...b.steps.values()];
  const ends = steps.filter((s) => s.endBefore);
  const starts = steps.filter((s) => s.start);
  const running = [...b.running.values()].filter((r) => !b.finishes.has(r.jobId));
  const runOf = new Map([...b.running.values()].map((r) => [r.jobId, r]));
  const fin = [...b.finishes.values()];
  return {
    ends: {
      jobId: ends.map((s) => s.jobId),
      idx: ends.map((s) => s.idx),
      exitCode: ends.map((s) => s.endBefore!.exitCode),
      timedOut: ends.map((s) => s.endBefore!.timedOut),
      at: ends.map((s) => s.endBefore!.at.toISOString()),
    },
    starts: {
      jobId: starts.map((s) => s.jobId),
      idx: starts.map((s) => s.idx),
      name: starts.map((s) => storableLine(s.start!.name)),
      exitCode: starts.map((s) => s.end?.exitCode ?? null),
      timedOut: starts.map((s) => s.end?.timedOut ?? false),
      at: starts.map((s) => s.start!.at.toISOString()),
      endAt: starts.map((s) => s.end?.at.toISOString() ?? null),
    },
    running: {
      jobId: running.map((r) => r.jobId),
      agentId: running.map((r) => r.agentId),
      at: running.map((r) => r.at.toISOString()),
    },
    finishes: {
      jobId: fin.map((f) => f.jobId),
      state: fin.map((f) => f.state),
      at: fin.map((f) => f.at.toISOString()),
      exitCode: fin.map((f) => f.fields.exitCode),
      reason: fin.map((f) => f.fields.reason),
      runAgent: fin.map((f) => runOf.get(f.jobId)?.agentId ?? null),
      runAt: fin.map((f) => runOf.get(f.jobId)?.at.toISOString() ?? null),
      owner: fin.map((f) => f.fields.owner ?? null),
    },
  };
}
