/**
 * `GET /api/v1/trace/jobs`: the job history as a JSONL trace (the simulator's input), streamed: the
 * jobs, then the spawn, hand-over and release latencies of the provisions decided in the window.
 */
import type { Hono } from 'hono';
import { formatSampleLine } from '../scaler/sim/trace-samples.js';
import { formatTraceLine, type TraceJob } from '../scaler/sim/trace.js';
import type { Store } from '../store/index.js';
import type { Clock } from '../util/clock.js';
import { parseDurationMs } from '../util/duration.js';
import { readTraceSamples } from './trace-samples-query.js';

const PAGE = 1000;
/** Provisions whose latencies one trace carries (about 200 bytes each in memory). */
const MAX_PROVISIONS = 1_000_000;

export function registerTraceRoute(app: Hono, deps: { store: Store; clock: Clock }): void {
  app.get('/api/v1/trace/jobs', (c) => {
    const sinceText = c.req.query('since') ?? '7d';
    const sinceMs = parseDurationMs(sinceText);
    if (sinceMs === undefined) {
      return c.json(
        {
          error: 'bad request',
          problems: [`since: "${sinceText}" is not a duration; use e.g. 90m, 12h, 7d`],
        },
        400,
      );
    }
    const from = new Date(deps.clock.now() - sinceMs);
    const db = deps.store.db;
    const enc = new TextEncoder();
    let after: string | undefined;
    let jobsDone = false;
    // Pages by submission order, so a long history never sits in memory at once.
    const stream = new ReadableStream<Uint8Array>({
      async pull(ctl) {
        if (!jobsDone) {
          const rows = await tracePage(db, from, after);
          if (rows.length > 0) {
            after = rows[rows.length - 1]!.seq;
            ctl.enqueue(enc.encode(rows.map((r) => `${formatTraceLine(traceJob(r))}\n`).join('')));
            return;
          }
          jobsDone = true;
        }
        // The releases pair ends with later decisions, so the samples are read as a whole.
        const samples = await readTraceSamples(deps.store, from, MAX_PROVISIONS);
        if (samples === undefined) {
          ctl.error(new Error(`more than ${MAX_PROVISIONS} provisions in the window; choose a shorter one`));
          return;
        }
        if (samples.length) ctl.enqueue(enc.encode(samples.map((x) => `${formatSampleLine(x)}\n`).join('')));
        ctl.close();
      },
    });
    return c.body(stream, 200, { 'content-type': 'application/x-ndjson; charset=utf-8' });
  });
}

/**
 * The trace of jobs submitted since `from`, oldest first, or undefined when it holds more than `max`
 * jobs (a caller that keeps it in memory sets the bound).
 */
export async function readTrace(store: Store, from: Date, max: number): Promise<TraceJob[] | undefined> {
  const out: TraceJob[] = [];
  let after: string | undefined;
  for (;;) {
    const rows = await tracePage(store.db, from, after);
    if (rows.length === 0) return out;
    if (out.length + rows.length > max) return undefined;
    for (const r of rows) out.push(traceJob(r));
    after = rows[rows.length - 1]!.seq;
  }
}

function tracePage(db: Store['db'], from: Date, after: string | undefined) {
  let q = db
    .selectFrom('jobs')
    .leftJoin('agents', 'agents.id', 'jobs.agent_id')
    .select([
      'jobs.id',
      'jobs.seq',
      'jobs.runs_on',
      'jobs.spec',
      'jobs.state',
      'jobs.agent_id',
      'jobs.priority',
      'jobs.owner',
      'jobs.created_at',
      'jobs.started_at',
      'jobs.finished_at',
      'agents.scaler_name',
    ])
    .where('jobs.created_at', '>=', from)
    .orderBy('jobs.seq')
    .limit(PAGE);
  if (after !== undefined) q = q.where('jobs.seq', '>', after);
  return q.execute();
}

interface Row {
  id: string;
  runs_on: unknown;
  spec: unknown;
  state: string;
  agent_id: string | null;
  priority: number;
  owner: string | null;
  created_at: Date | string;
  started_at: Date | string | null;
  finished_at: Date | string | null;
  scaler_name: string | null;
}

const ms = (d: Date | string | null): number | undefined => (d === null ? undefined : new Date(d).getTime());

function traceJob(r: Row): TraceJob {
  const submit = ms(r.created_at)!;
  const started = ms(r.started_at);
  const finished = ms(r.finished_at);
  const spec = (typeof r.spec === 'string' ? JSON.parse(r.spec) : r.spec) as {
    resources?: TraceJob['resources'];
  };
  const j: TraceJob = {
    id: r.id,
    submitMs: submit,
    labels: (typeof r.runs_on === 'string' ? JSON.parse(r.runs_on) : r.runs_on) as string[],
    queueWaitMs: started === undefined ? null : Math.max(0, started - submit),
    runMs: started === undefined || finished === undefined ? null : Math.max(0, finished - started),
    result: r.state,
  };
  if (spec?.resources) j.resources = spec.resources;
  if (r.agent_id) j.backend = /^scaler-([a-z-]+)-[0-9a-f]+$/.exec(r.agent_id)?.[1] ?? 'static';
  if (r.scaler_name) j.scaler = r.scaler_name;
  if (r.priority) j.priority = r.priority;
  if (r.owner) j.owner = r.owner;
  return j;
}
