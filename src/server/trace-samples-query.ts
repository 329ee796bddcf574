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
  bound_job_id: string | null;
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
      's.bound_job_id',
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
 * What one provision shows: its spawn (decision to registration) and, for the job it ran, the
 * hand-over (agent free for the job to its start).
 */
export function samplesOf(r: Row): TraceSample[] {
  const base = { scaler: r.scaler_name, backend: r.backend_type, labelSet: r.label_set };
  const decided = ms(r.decided_at)!;
  const registered = ms(r.registered_at);
  const created = ms(r.created_at);
  const started = ms(r.started_at);
  const out: TraceSample[] = [];
  if (registered !== undefined)
    out.push({ kind: 'spawn', atMs: decided, ms: Math.max(0, registered - decided), ...base });
  if (registered !== undefined && created !== undefined && started !== undefined) {
    const free = Math.max(created, registered);
    out.push({ kind: 'dispatch', atMs: free, ms: Math.max(0, started - free), ...base });
  }
  return out;
}

/**
 * Releases, per scaler: from a job's end until the capacity its agent held was spawned into again.
 * Each end, in order, is paired with the first later spawn decided for a job that no earlier end
 * took; an agent whose records were gone sooner (nothing was waiting) ends its release there.
 */
export function releasesOf(rows: readonly Row[]): TraceSample[] {
  const byScaler = new Map<string, Row[]>();
  for (const r of rows) byScaler.set(r.scaler_name, [...(byScaler.get(r.scaler_name) ?? []), r]);
  const out: TraceSample[] = [];
  for (const group of byScaler.values()) {
    const decisions = group
      .filter((r) => r.bound_job_id !== null)
      .map((r) => ms(r.decided_at)!)
      .sort((a, b) => a - b);
    const ends = group
      .filter((r) => r.finished_at !== null)
      .map((r) => ({ r, end: ms(r.finished_at)! }))
      .sort((a, b) => a.end - b.end);
    let k = 0;
    for (const { r, end } of ends) {
      while (k < decisions.length && decisions[k]! < end) k++;
      const next = k < decisions.length ? decisions[k++]! : Infinity;
      const until = Math.min(next, ms(r.gone_at) ?? Infinity);
      if (until === Infinity) continue;
      out.push({
        kind: 'release',
        atMs: end,
        ms: until - end,
        scaler: r.scaler_name,
        backend: r.backend_type,
        labelSet: r.label_set,
      });
    }
  }
  return out.sort((a, b) => a.atMs - b.atMs);
}

/**
 * Every latency sample of the provisions decided since `from` (spawns and hand-overs in decision
 * order, then releases), or undefined when there are more than `max` provisions: pairing the
 * releases needs them all at once.
 */
export async function readTraceSamples(
  store: Store,
  from: Date,
  max: number,
): Promise<TraceSample[] | undefined> {
  const rows: Row[] = [];
  let after: ReturnType<typeof cursorOf> | undefined;
  for (;;) {
    const page = await samplePage(store.db, from, after);
    if (page.length === 0) break;
    rows.push(...page);
    if (rows.length > max) return undefined;
    after = cursorOf(page[page.length - 1]!);
  }
  return [...rows.flatMap(samplesOf), ...releasesOf(rows)];
}
