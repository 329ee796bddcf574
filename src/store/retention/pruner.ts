import { sql, type Kysely } from 'kysely';
import type { Database } from '../schema.js';
import { JobPruner } from './job-pruner.js';
import type { RetentionPolicy } from './policy.js';
import { PRUNE_RULES, type AgeSetting, type PruneRule } from './rules.js';

/** What one prune removed (or, dry, would remove), per table. */
export interface PruneReport {
  dryRun: boolean;
  at: string;
  /** Rows per table; tables with nothing to do are listed with 0. */
  tables: Record<string, number>;
  total: number;
  /** Stopped early (leadership lost, shutting down): the rest goes on the next run. */
  interrupted: boolean;
}

export interface PrunerDeps {
  db: Kysely<Database>;
  policy: RetentionPolicy;
  now: () => number;
  /** Called after each batch with the rows it deleted (feeds the pruned-rows metric). */
  onPruned?: (table: string, rows: number) => void;
  rules?: readonly PruneRule[];
}

/**
 * Deletes what retention no longer keeps, in batches of `policy.batchRows` rows: each batch is
 * one statement (or one small transaction for jobs), so no lock is held for long and writers
 * interleave between batches. Safe to run on several instances at once (picks skip rows that
 * are locked, and a delete of a row already gone is a no-op), though only the leader runs it.
 */
export class Pruner {
  private readonly jobs: JobPruner;
  private readonly rules: readonly PruneRule[];

  constructor(private readonly deps: PrunerDeps) {
    this.jobs = new JobPruner(deps.db);
    this.rules = deps.rules ?? PRUNE_RULES;
  }

  get policy(): RetentionPolicy {
    return this.deps.policy;
  }

  private cutoff(setting: AgeSetting): Date | undefined {
    const ms = this.deps.policy[setting];
    return ms === null ? undefined : new Date(this.deps.now() - ms);
  }

  private async exists(table: string): Promise<boolean> {
    const r = await sql<{ ok: boolean }>`select to_regclass(${table}) is not null as ok`.execute(
      this.deps.db,
    );
    return r.rows[0]?.ok === true;
  }

  async run(opts: { dryRun?: boolean; signal?: AbortSignal } = {}): Promise<PruneReport> {
    const dryRun = opts.dryRun ?? false;
    const tables: Record<string, number> = {};
    const add = (table: string, n: number) => {
      tables[table] = (tables[table] ?? 0) + n;
      if (!dryRun && n > 0) this.deps.onPruned?.(table, n);
    };
    const stop = () => opts.signal?.aborted === true;
    const limit = this.deps.policy.batchRows;
    const jobCutoff = this.cutoff('jobsMs');
    if (jobCutoff) {
      if (dryRun) for (const [t, n] of Object.entries(await this.jobs.count(jobCutoff))) add(t, n);
      else {
        for (;;) {
          if (stop()) break;
          const { ids, stepRows } = await this.jobs.pruneBatch(jobCutoff, new Date(this.deps.now()), limit);
          add('jobs', ids.length);
          add('step_results', stepRows);
          if (ids.length < limit) break;
        }
      }
    }
    // Logs of jobs tombstoned by this or an earlier run (even if jobs retention is now off).
    if (!dryRun && !stop())
      for (const [t, n] of Object.entries(await this.jobs.pruneLogs(limit, opts.signal))) add(t, n);
    for (const rule of this.rules) {
      if (stop()) break;
      const cutoff = this.cutoff(rule.setting);
      if (!cutoff || (rule.optional && !(await this.exists(rule.table)))) continue;
      add(rule.table, dryRun ? await this.countRule(rule, cutoff) : await this.pruneRule(rule, cutoff, stop));
    }
    return {
      dryRun,
      at: new Date(this.deps.now()).toISOString(),
      tables,
      total: Object.values(tables).reduce((a, b) => a + b, 0),
      interrupted: stop(),
    };
  }

  private async countRule(rule: PruneRule, cutoff: Date): Promise<number> {
    const r = await sql<{ n: string }>`
      select count(*) as n from ${sql.table(rule.table)} where ${rule.where(cutoff)}`.execute(this.deps.db);
    return Number(r.rows[0]?.n ?? 0);
  }

  private async pruneRule(rule: PruneRule, cutoff: Date, stop: () => boolean): Promise<number> {
    const limit = this.deps.policy.batchRows;
    let total = 0;
    for (;;) {
      const res = await sql`
        delete from ${sql.table(rule.table)} where ctid = any(array(
          select ctid from ${sql.table(rule.table)} where ${rule.where(cutoff)} limit ${limit}))`.execute(
        this.deps.db,
      );
      const n = Number(res.numAffectedRows ?? 0);
      total += n;
      if (n < limit || stop()) return total;
    }
  }

  /** The tombstone of a pruned job (for the API's "pruned" answer). */
  tombstone(id: string) {
    return this.jobs.tombstone(id);
  }
}

/** The database's size on disk, in bytes (the embedded one's data dir or the PostgreSQL database). */
export async function databaseBytes(db: Kysely<Database>): Promise<number> {
  const r = await sql<{ bytes: string }>`select pg_database_size(current_database()) as bytes`.execute(db);
  return Number(r.rows[0]?.bytes ?? 0);
}
