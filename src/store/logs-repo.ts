import { sql, type Kysely, type Selectable } from 'kysely';
import { toWellFormedText } from '../jobs/safe-text.js';
import { decodeChunk, encodeChunk, LINE_ID_SCALE, splitIntoChunks } from './log-chunks.js';
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

  /** Store lines as chunks (see log-chunks.ts): one row per chunk of one job, in order. */
  async append(lines: LogLine[]): Promise<void> {
    const byJob = new Map<string, LogLine[]>();
    for (const l of lines) {
      const clean = { ...l, stream: storableLine(l.stream), line: storableLine(l.line) };
      const list = byJob.get(l.jobId);
      if (list) list.push(clean);
      else byJob.set(l.jobId, [clean]);
    }
    const rows = [...byJob].flatMap(([jobId, ls]) =>
      splitIntoChunks(ls).map((c) => sql`(${jobId}, ${c.length}, ${encodeChunk(c)})`),
    );
    // Rows of one statement take their ids in order, so a job's chunks read back in order.
    for (let i = 0; i < rows.length; i += 64)
      await sql`insert into job_log_chunks (job_id, lines, data) values ${sql.join(rows.slice(i, i + 64))}`.execute(
        this.db,
      );
  }

  /**
   * A job's lines after line id `afterId`, in order, at most `limit`: per-line rows written by
   * older versions first (their ids sort before every chunk line), then the chunks' lines.
   */
  async list(jobId: string, afterId?: number, limit = 10_000): Promise<LogRow[]> {
    let q = this.db.selectFrom('job_logs').selectAll().where('job_id', '=', jobId);
    if (afterId !== undefined) q = q.where('id', '>', String(afterId));
    const out: LogRow[] = await q.orderBy('id').limit(limit).execute();
    let fromChunk = afterId === undefined ? 0 : Math.floor(afterId / LINE_ID_SCALE);
    while (out.length < limit) {
      const page = await sql<{ id: string; data: Uint8Array }>`
        select id, data from job_log_chunks where job_id = ${jobId} and id >= ${fromChunk}
        order by id limit 32`.execute(this.db);
      for (const chunk of page.rows) {
        // A full page decodes no further chunk: a page reads about ten of the 32 fetched.
        if (out.length >= limit) break;
        const base = Number(chunk.id) * LINE_ID_SCALE;
        for (const [i, l] of decodeChunk(chunk.data).entries()) {
          const id = base + i;
          if ((afterId !== undefined && id <= afterId) || out.length >= limit) continue;
          out.push({
            id: String(id),
            job_id: jobId,
            step_idx: l.stepIdx,
            stream: l.stream,
            line: l.line,
            ts: l.ts,
          });
        }
      }
      if (page.rows.length < 32) break;
      fromChunk = Number(page.rows[page.rows.length - 1]!.id) + 1;
    }
    return out;
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
