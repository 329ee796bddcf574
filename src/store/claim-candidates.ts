import { sql, type RawBuilder } from 'kysely';

/**
 * One agent's claim: the job planned for it, then, in a cluster, queued jobs it may take instead
 * (in order) when a peer has taken the planned one. Within one statement no job is offered to two
 * agents.
 */
export interface ClaimRequest {
  jobId: string;
  agentId: string;
  alts?: readonly string[] | undefined;
}

/** A statement's candidates flattened: row i offers job `id[i]` to `agent[i]` at `rank[i]` (0: planned). */
export interface Candidates {
  id: string[];
  agent: string[];
  rank: number[];
}

/** Undefined when no claim offers an alternate (the plain form then serves). */
export function candidatesOf(claims: readonly ClaimRequest[]): Candidates | undefined {
  if (!claims.some((c) => c.alts?.length)) return undefined;
  const out: Candidates = { id: [], agent: [], rank: [] };
  for (const c of claims)
    [c.jobId, ...(c.alts ?? [])].forEach((id, rank) => {
      out.id.push(id);
      out.agent.push(c.agentId);
      out.rank.push(rank);
    });
  return out;
}

/**
 * The rows a claim statement updates, as `v(id, agent)`. With candidates: for each agent the first
 * of its jobs queued in the statement's snapshot, so a job a peer took earlier costs no second
 * statement. No row is locked in that read: a candidate another transaction holds is waited for by
 * the update, which takes it only if it is still queued then. (Passing over held rows would let a
 * planned job that is still queued be dropped from the instance's queue, say while a scale claim
 * holds it; a job is only ever dropped once its committed state says a peer has it.)
 */
export function claimSource(
  jobIds: readonly string[],
  agentIds: readonly string[],
  c: Candidates | undefined,
): RawBuilder<unknown> {
  if (!c) return sql`unnest(${jobIds}::text[], ${agentIds}::text[]) as v(id, agent)`;
  return sql`(select distinct on (v.agent) v.id, v.agent
      from unnest(${c.id}::text[], ${c.agent}::text[], ${c.rank}::int[]) as v(id, agent, rank)
      join jobs q on q.id = v.id where q.state = 'queued'
      order by v.agent, v.rank) as v(id, agent)`;
}
