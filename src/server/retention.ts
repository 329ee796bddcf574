import { EventEmitter } from 'node:events';
import type { Hono } from 'hono';
import { sql, type Kysely } from 'kysely';
import { Counter, Gauge } from 'prom-client';
import type { LeaderTask } from '../cluster/leader-work.js';
import type { Database } from '../store/index.js';
import { formatRetention, RETENTION_SETTINGS, type RetentionPolicy } from '../store/retention/policy.js';
import { databaseBytes, Pruner, type PruneReport } from '../store/retention/pruner.js';
import { errorMessage } from '../util/errors.js';
import type { Logger } from '../util/logger.js';
import { quote } from '../jobs/safe-text.js';
import type { Metrics } from './metrics.js';

/** How retention is shown by `diagnose`: each setting, the database size and the last prune. */
export interface DatabaseView {
  engine: string;
  bytes: number | null;
  retention: Record<string, string>;
  lastPrune: PruneReport | null;
}

/**
 * Retention in the server: the pruner as a leader-only task, its metrics (rows pruned per table,
 * database size), and the admin routes that run or preview a prune.
 */
export class RetentionService {
  readonly pruner: Pruner;
  private last: PruneReport | null = null;
  private readonly pruned: Counter<'table'>;
  /** Emits `report` (a PruneReport) after every prune that deleted, so waiters need no polling. */
  readonly events = new EventEmitter();

  constructor(
    private readonly db: Kysely<Database>,
    private readonly engine: string,
    policy: RetentionPolicy,
    now: () => number,
    metrics: Metrics,
    private readonly log: Logger,
  ) {
    this.pruned = new Counter({
      name: 'kici_orch_retention_pruned_rows_total',
      help: 'Rows deleted by retention, by table',
      labelNames: ['table'],
      registers: [metrics.registry],
    });
    new Gauge({
      name: 'kici_orch_database_bytes',
      help: 'Size of the database on disk (pg_database_size)',
      registers: [metrics.registry],
      collect: async function (this: Gauge) {
        this.set(await databaseBytes(db).catch(() => NaN));
      },
    });
    this.pruner = new Pruner({ db, policy, now, onPruned: (table, n) => this.pruned.inc({ table }, n) });
  }

  /** The periodic prune, run by whichever instance holds the leader lease. */
  leaderTask(): LeaderTask {
    return {
      name: 'retention-prune',
      intervalMs: this.pruner.policy.intervalMs,
      run: async (signal) => {
        await this.prune(false, signal);
      },
    };
  }

  async prune(dryRun: boolean, signal?: AbortSignal): Promise<PruneReport> {
    const report = await this.pruner.run({ dryRun, ...(signal ? { signal } : {}) });
    if (!dryRun) {
      // PostgreSQL's autovacuum makes deleted rows' space reusable; the embedded database has no
      // background workers, so without this its files would grow for ever despite retention.
      if (this.engine === 'pglite') await this.vacuum(report);
      this.last = report;
      this.events.emit('report', report);
      if (report.total > 0)
        this.log.info(
          { tables: report.tables, interrupted: report.interrupted },
          'retention pruned old rows',
        );
    }
    return report;
  }

  private async vacuum(report: PruneReport): Promise<void> {
    for (const [table, n] of Object.entries(report.tables)) {
      if (n === 0 || !/^[a-z_]+$/.test(table)) continue;
      await sql`vacuum ${sql.table(table)}`
        .execute(this.db)
        .catch((err: unknown) =>
          this.log.warn({ err: errorMessage(err), table }, 'vacuum after a prune failed'),
        );
    }
  }

  async view(): Promise<DatabaseView> {
    const p = this.pruner.policy;
    const retention: Record<string, string> = {};
    for (const key of Object.keys(RETENTION_SETTINGS) as (keyof typeof RETENTION_SETTINGS)[])
      retention[RETENTION_SETTINGS[key].flag] = formatRetention(p[key]);
    const bytes = await databaseBytes(this.db).catch((err: unknown) => {
      this.log.warn({ err: errorMessage(err) }, 'could not read the database size');
      return null;
    });
    return { engine: this.engine, bytes, retention, lastPrune: this.last };
  }

  /** The answer for a job that retention removed, or undefined when it never existed. */
  async prunedJob(id: string) {
    const t = await this.pruner.tombstone(id);
    if (!t) return undefined;
    return {
      error: 'pruned',
      id: t.id,
      runId: t.run_id,
      name: t.name,
      state: t.state,
      finishedAt: t.finished_at,
      prunedAt: t.pruned_at,
      problems: [
        `job ${t.id} (${t.name}, ${t.state}) was pruned by retention at ${new Date(t.pruned_at).toISOString()}; its record and logs are gone`,
      ],
    };
  }
}

/**
 * POST /api/v1/prune[?dryRun=true] runs a prune now (or lists what one would remove);
 * GET /api/v1/database shows the size, the settings and the last prune.
 */
export function registerRetentionRoutes(app: Hono, deps: { retention?: RetentionService | undefined }): void {
  const off = { error: 'not available', problems: ['retention is not running on this server'] };
  app.post('/api/v1/prune', async (c) => {
    const dry = c.req.query('dryRun');
    if (dry !== undefined && dry !== 'true' && dry !== 'false')
      return c.json(
        { error: 'bad request', problems: [`dryRun: expected true or false, got ${quote(dry)}`] },
        400,
      );
    if (!deps.retention) return c.json(off, 503);
    return c.json(await deps.retention.prune(dry === 'true'));
  });
  app.get('/api/v1/database', async (c) =>
    deps.retention ? c.json(await deps.retention.view()) : c.json(off, 503),
  );
}
