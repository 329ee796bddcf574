import type { Kysely } from 'kysely';
import { BatchDeadline } from './batch-deadline.js';
import type { ClaimRequest } from './claim-candidates.js';
import { claimRows, emptyBatch, isEmpty, isSimple, type ResultRide } from './group-commit-batch.js';
import { writeInOrder, writeOneByOne } from './group-commit-ordered.js';
import { commitAsPipeline } from './group-commit-pipeline.js';
import type { JobsRepo } from './jobs-repo.js';
import type { LogsRepo } from './logs-repo.js';
import { isPipelined } from './pglite-dialect.js';
import {
  commitAsOneStatement,
  rowsOf,
  type ClaimRows,
  type Batch,
  type FinishFields,
  type Step,
  type Waiter,
} from './group-commit-sql.js';
import type { Database, JobState } from './schema.js';

export type { FinishFields } from './group-commit-sql.js';
export type { ResultRide } from './group-commit-batch.js';

/**
 * Group commit for the per-job writes of the hot path ("running", step rows, the result): the
 * writes that arrive close together go to the store as one statement instead of one statement (and
 * one commit) each. On the embedded database every statement costs real CPU in this process, so
 * this is most of a job's cost.
 *
 * Two kinds of write, two deadlines. A result waits at most `tickMs` (or goes out at once when the
 * caller says someone waits on it). The marks ("running", step rows) wait for their own job's
 * result, at most `marksMs`: a short job's marks then fold into fewer rows (its "running" into
 * the result's update, a step's start and end into one insert) instead of riding, one statement
 * each, on other jobs' commits. A crash loses at most `marksMs` of marks; a restarted job that is
 * still 'dispatched' is picked up when its agent reconnects, and a result is never lost (see below).
 *
 * Durability of results is unchanged: each write's promise resolves only once its statement
 * committed (a result is acknowledged to its agent after that). When a batch fails, its writes are
 * tried again one by one with the plain repo calls, so one bad row never fails another job's
 * write, and a write that still fails rejects its own promise for the caller's retry.
 *
 * Within a batch the order per job holds: step rows, then "running", then the result. A "running"
 * mark and a result for the same job fold into the result's single row update.
 */
export class GroupCommit {
  private batch = emptyBatch();
  /** When the pending batch goes out at the latest. */
  private readonly deadline = new BatchDeadline(() => this.flushDue());
  private rider: ((finished: string[]) => ResultRide | undefined) | undefined;
  /** On the embedded database a batch goes as a pipeline of small statements (known after the first). */
  private pipelined: boolean | undefined;
  private writing: Promise<void> = Promise.resolve();
  /** Batches handed to the store and not yet settled. */
  private inFlight = 0;
  #statements = 0;
  #settled = 0;

  constructor(
    private readonly db: Kysely<Database>,
    private readonly repos: { jobs: JobsRepo; logs: LogsRepo },
    private readonly tickMs = 20,
    private readonly marksMs = 250,
    /** false: one statement per batch even on the embedded database (tests cover both ways). */
    pipeline?: boolean,
  ) {
    if (pipeline === false) this.pipelined = false;
  }

  /** Statements sent for batches (not the one-by-one fallback): a cost figure for tests and benches. */
  get statements(): number {
    return this.#statements;
  }

  /**
   * Batches settled so far. A reader of the store (the dashboard) watches it: a change held in a
   * batch is visible in memory before it is in the store, and only this says it now is.
   */
  get settled(): number {
    return this.#settled;
  }

  /**
   * Who picks the claims that ride on a batch with results (the dispatcher: the next jobs of the
   * agents those results free). Asked as the batch goes out, so it decides on current state.
   */
  rideOnResults(pick: (finished: string[]) => ResultRide | undefined): void {
    this.rider = pick;
  }

  /** dispatched → running for this agent (a no-op when the job is no longer its dispatched job). A mark. */
  running(jobId: string, agentId: string, at: Date): Promise<void> {
    return this.add<void>(this.marksMs, (w) => {
      // After a result the row is final (or was already): a "running" mark cannot apply any more.
      if (this.batch.finishes.has(jobId)) return void this.batch.noops.push(w);
      const key = `${jobId}\u0000${agentId}`;
      const r = this.batch.running.get(key);
      if (r) r.waiters.push(w);
      else this.batch.running.set(key, { jobId, agentId, at, due: this.markDue(), waiters: [w] });
    });
  }

  stepStarted(jobId: string, idx: number, name: string, at: Date): Promise<void> {
    return this.add<void>(this.marksMs, (w) => {
      const s = this.step(jobId, idx, w);
      // A re-sent start (after a reconnect) keeps the first one, as the row's insert does.
      s.start ??= { name, at };
    });
  }

  stepFinished(
    jobId: string,
    idx: number,
    exitCode: number | null,
    timedOut: boolean,
    at: Date,
  ): Promise<void> {
    return this.add<void>(this.marksMs, (w) => {
      const s = this.step(jobId, idx, w);
      if (s.start) s.end = { exitCode, timedOut, at };
      else s.endBefore = { exitCode, timedOut, at };
    });
  }

  /**
   * Settle an open job; true when this write settled it, false when it already was final. `soon`:
   * someone is waiting (the job's agent could take queued work), so it goes out in this turn of the
   * event loop rather than within the tick.
   */
  finish(jobId: string, state: JobState, fields: FinishFields, at: Date, soon = false): Promise<boolean> {
    return this.add<boolean>(soon ? 0 : this.tickMs, (w) => {
      const f = this.batch.finishes.get(jobId);
      // A second result in one tick loses, as its conditional update would.
      if (f) f.waiters.push({ resolve: () => w.resolve(false), reject: w.reject });
      else this.batch.finishes.set(jobId, { jobId, state, fields, at, waiters: [w] });
    });
  }

  /** Write what is pending now; resolves once it (and every batch before it) is committed or failed. */
  flush(): Promise<void> {
    this.deadline.cancel();
    const batch = this.batch;
    this.batch = emptyBatch();
    if (!isEmpty(batch)) this.enqueue(() => this.write(batch));
    return this.writing;
  }

  /** A deadline passed: write what is due, and keep the marks still waiting for their results. */
  private flushDue(): void {
    this.deadline.cancel();
    const batch = this.takeDue();
    if (!isEmpty(batch)) this.enqueue(() => this.write(batch));
  }

  /**
   * Split the pending batch: the results, with every mark of their jobs and every mark due within
   * a tick, go now; the other marks stay pending, under a timer for the earliest of them.
   */
  private takeDue(): Batch {
    const b = this.batch;
    const soon = performance.now() + this.tickMs;
    const goes = (x: { jobId: string; due: number }) => x.due <= soon || b.finishes.has(x.jobId);
    const out: Batch = { running: new Map(), steps: new Map(), finishes: b.finishes, noops: b.noops };
    const rest = emptyBatch();
    for (const [k, r] of b.running) (goes(r) ? out : rest).running.set(k, r);
    for (const [k, st] of b.steps) (goes(st) ? out : rest).steps.set(k, st);
    this.batch = rest;
    const next = Math.min(
      ...[...rest.running.values()].map((r) => r.due),
      ...[...rest.steps.values()].map((st) => st.due),
    );
    if (Number.isFinite(next)) this.deadline.arm(next);
    return out;
  }

  private markDue(): number {
    return performance.now() + this.marksMs;
  }

  /**
   * Claims that ride on the pending results: one statement writes both, at once (the claim does not
   * wait for the tick, and the results go out early, with their jobs' marks and the marks due). A
   * dispatch pass usually follows a result, so the next job's claim and the last one's result share
   * a commit. Undefined when the claims cannot ride (no result pending, a batch already in flight,
   * or the batch touches one of their jobs): the caller claims on its own. Rejects when the statement failed, with the claims' outcome unknown,
   * as a failed claim statement's is; the batch's writes are then retried one by one.
   */
  claimWith(
    claims: ClaimRequest[],
    at: Date,
    owner: string | undefined,
  ): Promise<Map<string, unknown>> | undefined {
    const all = this.batch;
    // Only results (and what is due with them) are worth a ride: held marks wait for their own.
    if (this.inFlight || !all.finishes.size || !isSimple(all)) return undefined;
    const ids = new Set(claims.flatMap((c) => [c.jobId, ...(c.alts ?? [])]));
    if ([...all.finishes.keys()].some((id) => ids.has(id))) return undefined;
    if ([...all.running.values(), ...all.steps.values()].some((x) => ids.has(x.jobId))) return undefined;
    this.deadline.cancel();
    const b = this.takeDue();
    const rows = claimRows({ claims, at, owner });
    return new Promise((resolve, reject) =>
      this.enqueue(async () => {
        let outcome;
        try {
          outcome = await this.commit(b, rows);
        } catch (err) {
          reject(err);
          return writeOneByOne(this.repos, b);
        }
        this.settle(b, outcome.settled);
        resolve(outcome.claimed);
      }),
    );
  }

  private enqueue(write: () => Promise<void>): void {
    this.inFlight++;
    this.writing = this.writing.then(write).finally(() => {
      this.inFlight--;
      this.#settled++;
    });
  }

  private step(jobId: string, idx: number, w: Waiter<void>): Step {
    const key = `${jobId}\u0000${idx}`;
    let s = this.batch.steps.get(key);
    if (!s) this.batch.steps.set(key, (s = { jobId, idx, due: this.markDue(), waiters: [] }));
    s.waiters.push(w);
    return s;
  }

  /** Every write joins the pending batch, which goes out by the earliest deadline of its writes. */
  private add<T>(withinMs: number, put: (w: Waiter<T>) => void): Promise<T> {
    const p = new Promise<T>((resolve, reject) => put({ resolve, reject }));
    this.deadline.arm(performance.now() + withinMs);
    return p;
  }

  /** One batch (and any claims riding on it) as one atomic write: a pipeline, or one statement. */
  private async commit(b: Batch, claims?: ClaimRows) {
    this.#statements++;
    this.pipelined ??= await isPipelined(this.db as Kysely<unknown>);
    const piped = this.pipelined ? await commitAsPipeline(this.db, b, claims) : undefined;
    return piped ?? commitAsOneStatement(this.db, rowsOf(b), claims);
  }

  private async write(b: Batch): Promise<void> {
    // A failed look (no connection) leaves it unknown: the write below meets the same error and
    // takes its own fallback, and the next batch asks again.
    this.pipelined ??= await isPipelined(this.db as Kysely<unknown>).catch(() => undefined);
    if (!this.pipelined && !isSimple(b)) {
      let settled: Set<string>;
      try {
        settled = await this.db
          .transaction()
          .execute(async (trx) => writeInOrder(trx, b, () => this.#statements++));
      } catch {
        return writeOneByOne(this.repos, b);
      }
      return this.settle(b, settled);
    }
    const ride = this.rideFor(b);
    let outcome;
    try {
      outcome = await this.commit(b, ride && claimRows(ride));
    } catch (err) {
      ride?.failed(err);
      return writeOneByOne(this.repos, b);
    }
    this.settle(b, outcome.settled);
    ride?.claimed(outcome.claimed);
  }

  /** The claims riding on this batch's results; none that touch a job of the batch. */
  private rideFor(b: Batch): ResultRide | undefined {
    if (!b.finishes.size || !this.rider) return undefined;
    let ride: ResultRide | undefined;
    try {
      ride = this.rider([...b.finishes.keys()]);
    } catch {
      return undefined; // the rider undoes its own state; a batch must never fail for it
    }
    if (!ride?.claims.length) return ride && (ride.claimed(new Map()), undefined);
    const inBatch = (id: string) =>
      b.finishes.has(id) || [...b.running.values(), ...b.steps.values()].some((x) => x.jobId === id);
    // An alternate left out is simply not taken: its claimer gets it back on its queue.
    const claims = ride.claims
      .filter((c) => !inBatch(c.jobId))
      .map((c) => (c.alts ? { ...c, alts: c.alts.filter((id) => !inBatch(id)) } : c));
    return { ...ride, claims };
  }

  private settle(b: Batch, settled: Set<string>): void {
    for (const s of b.steps.values()) for (const w of s.waiters) w.resolve();
    for (const r of b.running.values()) for (const w of r.waiters) w.resolve();
    for (const w of b.noops) w.resolve();
    for (const f of b.finishes.values()) for (const w of f.waiters) w.resolve(settled.has(f.jobId));
  }
}
