import type { Kysely, Selectable } from 'kysely';
import type { ScalerPendingClaimsTable } from './scaler-tables.js';
import type { Database } from './schema.js';

export type ClaimRow = Omit<Selectable<ScalerPendingClaimsTable>, 'agent_token_ttl_ms'> & {
  agent_token_ttl_ms: number;
};

/** Claim codes of event provisions. Rows hold the code's SHA-256, never the code. */
export class ClaimsRepo {
  constructor(private readonly db: Kysely<Database>) {}

  async insert(r: {
    hash: string;
    prefix: string;
    agentId: string;
    scalerName: string;
    labels: string[];
    agentTokenTtlMs: number;
    orchestratorUrl: string;
    expiresAt: Date;
    now: Date;
  }): Promise<void> {
    await this.db
      .insertInto('scaler_pending_claims')
      .values({
        claim_hash: r.hash,
        claim_prefix: r.prefix,
        agent_id: r.agentId,
        scaler_name: r.scalerName,
        labels: JSON.stringify(r.labels),
        agent_token_ttl_ms: r.agentTokenTtlMs,
        orchestrator_url: r.orchestratorUrl,
        expires_at: r.expiresAt,
        created_at: r.now,
      })
      .execute();
  }

  /**
   * One conditional UPDATE: the row is consumed (and that commits) before any token is minted, so
   * two redeemers of one code, on any orchestrators, cannot both win.
   */
  async redeem(hash: string, now: Date, agentId?: string): Promise<ClaimRow | undefined> {
    let q = this.db
      .updateTable('scaler_pending_claims')
      .set({ consumed_at: now })
      .where('claim_hash', '=', hash)
      .where('consumed_at', 'is', null)
      .where('expires_at', '>', now);
    // A redeemer that names its agent id spends only a code issued for that id.
    if (agentId !== undefined) q = q.where('agent_id', '=', agentId);
    const row = await q.returningAll().executeTakeFirst();
    return row && { ...row, agent_token_ttl_ms: Number(row.agent_token_ttl_ms) };
  }

  /** Why a redeem missed: no row, already consumed, or expired. */
  async describe(hash: string): Promise<{ consumed: boolean; agentId: string } | undefined> {
    const row = await this.db
      .selectFrom('scaler_pending_claims')
      .select(['consumed_at', 'agent_id'])
      .where('claim_hash', '=', hash)
      .executeTakeFirst();
    return row && { consumed: row.consumed_at !== null, agentId: row.agent_id };
  }

  async invalidate(agentId: string): Promise<number> {
    const res = await this.db.deleteFrom('scaler_pending_claims').where('agent_id', '=', agentId).execute();
    return Number(res[0]?.numDeletedRows ?? 0);
  }

  /** Drop claims that expired before `cutoff`, consumed or not. */
  async purgeExpired(cutoff: Date): Promise<number> {
    const res = await this.db.deleteFrom('scaler_pending_claims').where('expires_at', '<', cutoff).execute();
    return Number(res[0]?.numDeletedRows ?? 0);
  }

  listForAgent(agentId: string) {
    return this.db
      .selectFrom('scaler_pending_claims')
      .select(['claim_prefix', 'agent_id', 'scaler_name', 'expires_at', 'consumed_at', 'created_at'])
      .where('agent_id', '=', agentId)
      .execute();
  }
}
