import type { Kysely, Selectable } from 'kysely';
import { toWellFormedText } from '../jobs/safe-text.js';
import type { Database, JobLogsTable, StepResultsTable } from './schema.js';

/**
 * PostgreSQL text cannot hold U+0000, and a lone surrogate cannot be encoded as UTF-8; either one
 * used to fail the insert of a whole batch. Both become U+FFFD (the replacement character), so
 * the line is kept and the spot stays visible.
 */
export function storableLine(line: string): string {
  return toWellFormedText(line.includes('\0') ? line.replaceAll('\0', '\uFFFD') : line);
}

export type LogRow = Selectable<JobLogsTable>;
export type StepRow = Selectable<StepResultsTable>;

export interface LogLine {
  jobId: string;
  stepIdx: number | null;
  stream: string;
  line: string;
  ts: Date;
}

export class LogsRepo {
  constructor(private readonly db: Kysely<Database>) {}

  async append(lines: LogLine[]): Promise<void> {
    for (let i = 0; i < lines.length; i += 1000) {
      const chunk = lines.slice(i, i + 1000).map((l) => ({
        job_id: l.jobId,
        step_idx: l.stepIdx,
        stream: storableLine(l.stream),
        line: storableLine(l.line),
        ts: l.ts,
      }));
      await this.db.insertInto('job_logs').values(chunk).execute();
    }
  }

  list(jobId: string, afterId?: number, limit = 10_000): Promise<LogRow[]> {
    let q = this.db.selectFrom('job_logs').selectAll().where('job_id', '=', jobId);
    if (afterId !== undefined) q = q.where('id', '>', String(afterId));
    return q.orderBy('id').limit(limit).execute();
  }

  async stepStarted(jobId: string, idx: number, name: string, now: Date): Promise<void> {
    await this.db
      .insertInto('step_results')
      .values({
        job_id: jobId,
        idx,
        name: storableLine(name),
        exit_code: null,
        timed_out: false,
        started_at: now,
      })
      .onConflict((oc) => oc.columns(['job_id', 'idx']).doNothing())
      .execute();
  }

  async stepFinished(jobId: string, idx: number, exitCode: number | null, timedOut: boolean, now: Date) {
    await this.db
      .updateTable('step_results')
      .set({ exit_code: exitCode, timed_out: timedOut, finished_at: now })
      .where('job_id', '=', jobId)
      .where('idx', '=', idx)
      .execute();
  }

  steps(jobId: string): Promise<StepRow[]> {
    return this.db
      .selectFrom('step_results')
      .selectAll()
      .where('job_id', '=', jobId)
      .orderBy('idx')
      .execute();
  }
}
