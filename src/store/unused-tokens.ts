import type { Insertable, Selectable } from 'kysely';
import type { AgentTokensTable } from './schema.js';

type TokenRow = Selectable<AgentTokensTable>;

/**
 * Tokens this process stored for agents it is starting, kept until their first check. A cold agent
 * registers after a boot during which the embedded database sat idle, and a statement after such a
 * spell costs several times one made back to back: answering the first check from here takes that
 * read off the way from the agent's hello to its job. Only where this process is the store's one
 * writer (the embedded database), so no revocation can happen behind its back; every revocation
 * and change of a kept token's agent drops it here first. A token is kept for one check only: its
 * later ones (a reconnect, a session to prove) read the store.
 */
export class UnusedTokens {
  private readonly byHash = new Map<string, TokenRow>();

  constructor(readonly enabled: boolean) {}

  keep(row: Insertable<AgentTokensTable>, now: Date): void {
    if (!this.enabled) return;
    // Tokens of agents that never came are dropped once expired, so the map stays small.
    for (const [hash, r] of this.byHash) if (r.expires_at && r.expires_at <= now) this.byHash.delete(hash);
    this.byHash.set(row.token_hash, {
      id: row.id,
      token_hash: row.token_hash,
      agent_id: row.agent_id,
      labels: typeof row.labels === 'string' ? (JSON.parse(row.labels) as string[]) : row.labels,
      kind: row.kind,
      expires_at: (row.expires_at as Date | null | undefined) ?? null,
      created_at: row.created_at as Date,
      revoked_at: null,
      last_used_at: null,
    });
  }

  /** The kept row for this hash, taken out (undefined when not kept). */
  take(hash: string): TokenRow | undefined {
    const row = this.byHash.get(hash);
    if (row) this.byHash.delete(hash);
    return row;
  }

  /** Forget what is kept for these token ids or agents (a revocation, a changed lifetime). */
  drop(match: { ids?: readonly string[]; agentIds?: readonly string[] }): void {
    for (const [hash, r] of this.byHash)
      if (match.ids?.includes(r.id) || match.agentIds?.includes(r.agent_id)) this.byHash.delete(hash);
  }
}
