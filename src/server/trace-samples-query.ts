/** The latency lines of a trace: each provision's spawn, hand-over and release, from the store. */
import { sql } from 'kysely';
import type { TraceSample } from '../scaler/sim/trace-samples.js';
import type { Store } from '../store/index.js';

const PAGE = 1000;

interface Row {
  agent_id: string;
  scaler_name: string;
  backend_type: string;
  label_set: string;
  decided_at: Date | string;
  registered_at: Date | string | null;
  gone_at: Date | string | null;
  created_at: Date | string | null;
  started_at: Date | string | null;
  finished_at: Date | string | null;
}

/** One page of provisions decided since `from`, by decision time, after the `after` cursor. */
export function samplePage(
  db: Store['db'],
  from: Date,
  after: { decidedAt: Date; agentId: string } | undefined,
): Promise<Row[]> {
  let q = db
    .selectFrom('scaler_spawn_times as s')
    .leftJoin('jobs as j', 'j.agent_id', 's.agent_id')
    .select([
      's.agent_id',
      's.scaler_name',
      's.backend_type',
      's.label_set',
      's.decided_at',
      's.registered_at',
      's.gone_at',
      'j.created_at',
      'j.started_at',
      'j.finished_at',
    ])
    .where('s.decided_at', '>=', from)
    .orderBy('s.decided_at')
    .orderBy('s.agent_id')
    .limit(PAGE);
  if (after) {
    q = q.where(sql<boolean>`(s.decided_at, s.agent_id) > (${after.decidedAt}, ${after.agentId})`);
  }
  return q.execute();
}

export const cursorOf = (r: Row) => ({ decidedAt: new Date(r.decided_at), agentId: r.agent_id });

const ms = (d: Date | string | null): number | undefined => (d === null ? undefined : new Date(d).getTime());

/**
 * What one provision shows: its spawn (decision to registration); for the job it ran, the hand-over
 * (agent free for the job to its start) and the release (the job's end until the agent was gone).
 */
export function samplesOf(r: Row): TraceSample[] {
  const base = { scaler: r.scaler_name, backend: r.backend_type, labelSet: r.label_set };
  const decided = ms(r.decided_at)!;
  const registered = ms(r.registered_at);
  const gone = ms(r.gone_at);
  const created = ms(r.created_at);
  const started = ms(r.started_at);
  const finished = ms(r.finished_at);
  const out: TraceSample[] = [];
  if (registered !== undefined)
    out.push({ kind: 'spawn', atMs: decided, ms: Math.max(0, registered - decided), ...base });
  if (registered !== undefined && created !== undefined && started !== undefined) {
    const free = Math.max(created, registered);
    out.push({ kind: 'dispatch', atMs: free, ms: Math.max(0, started - free), ...base });
  }
  if (finished !== undefined && gone !== undefined)
    out.push({ kind: 'release', atMs: finished, ms: Math.max(0, gone - finished), ...base });
  return out;
}

/** Every latency sample since `from`, or undefined when there are more than `max`. */
export async function readTraceSamples(
  store: Store,
  from: Date,
  max: number,
): Promise<TraceSample[] | undefined> {
  const out: TraceSample[] = [];
  let after: ReturnType<typeof cursorOf> | undefined;
  for (;;) {
    const rows = await samplePage(store.db, from, after);
    if (rows.length === 0) return out;
    for (const r of rows) out.push(...samplesOf(r));
    if (out.length > max) return undefined;
    after = cursorOf(rows[rows.length - 1]!);
  }
}
