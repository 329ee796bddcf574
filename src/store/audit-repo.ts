import type { Kysely } from 'kysely';
import type { Database } from './schema.js';

export interface AuditEntry {
  at: Date;
  tokenId: string | null;
  tokenName: string | null;
  role: string | null;
  action: string;
  target: string | null;
  /** `ok`, `denied` or `failed`. */
  result: 'ok' | 'denied' | 'failed';
  status: number;
  remote: string | null;
}

/** The audit trail of admin calls, shared by every instance on the database. */
export class AuditRepo {
  constructor(private readonly db: Kysely<Database>) {}

  async record(e: AuditEntry): Promise<void> {
    await this.db
      .insertInto('admin_audit')
      .values({
        at: e.at,
        token_id: e.tokenId,
        token_name: e.tokenName,
        role: e.role,
        action: e.action,
        target: e.target,
        result: e.result,
        status: e.status,
        remote: e.remote,
      })
      .execute();
  }

  /** Newest first, from `since` on. */
  async list(opts: { since?: Date; limit?: number } = {}): Promise<(AuditEntry & { id: number })[]> {
    let q = this.db.selectFrom('admin_audit').selectAll();
    if (opts.since) q = q.where('at', '>=', opts.since);
    const rows = await q
      .orderBy('id', 'desc')
      .limit(opts.limit ?? 1000)
      .execute();
    return rows.map((r) => ({
      id: Number(r.id),
      at: r.at,
      tokenId: r.token_id,
      tokenName: r.token_name,
      role: r.role,
      action: r.action,
      target: r.target,
      result: r.result as AuditEntry['result'],
      status: r.status,
      remote: r.remote,
    }));
  }
}
