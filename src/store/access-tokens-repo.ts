import { randomBytes } from 'node:crypto';
import type { Kysely, Selectable } from 'kysely';
import type { Role } from '../access/roles.js';
import type { AccessTokensTable, Database } from './schema.js';
import { hashSecret } from './tokens-repo.js';

/** What an operator may see of an access token: never its secret nor its hash. */
export interface AccessTokenInfo {
  id: string;
  name: string;
  role: Role;
  bootstrap: boolean;
  createdBy: string | null;
  createdAt: Date;
  expiresAt: Date | null;
  revokedAt: Date | null;
  lastUsedAt: Date | null;
}

export type AccessCheck =
  | { ok: true; token: AccessTokenInfo }
  | { ok: false; reason: 'unknown token' | 'token revoked' | 'token expired'; token?: AccessTokenInfo };

function toInfo(r: Selectable<AccessTokensTable>): AccessTokenInfo {
  return {
    id: r.id,
    name: r.name,
    role: r.role as Role,
    bootstrap: r.bootstrap,
    createdBy: r.created_by,
    createdAt: r.created_at,
    expiresAt: r.expires_at,
    revokedAt: r.revoked_at,
    lastUsedAt: r.last_used_at,
  };
}

export function newAccessTokenSecret(): string {
  return `kici_at_${randomBytes(32).toString('base64url')}`;
}

/**
 * Operators' access tokens, shared by every instance on the database. Each check reads the row,
 * so a revoke on one instance refuses the token on all of them at their next request.
 */
export class AccessTokensRepo {
  /** Last-used stamps are written at most this often per token, so reads stay reads. */
  private readonly stamped = new Map<string, number>();

  constructor(private readonly db: Kysely<Database>) {}

  /** Store a token; the secret is made here unless given (importing a bootstrap file). */
  async create(spec: {
    name: string;
    role: Role;
    now: Date;
    ttlMs?: number | undefined;
    bootstrap?: boolean;
    createdBy?: string | null;
    secret?: string;
  }): Promise<{ token: string; info: AccessTokenInfo }> {
    const token = spec.secret ?? newAccessTokenSecret();
    const row = await this.db
      .insertInto('access_tokens')
      .values({
        id: `at-${randomBytes(6).toString('hex')}`,
        name: spec.name,
        role: spec.role,
        token_hash: hashSecret(token),
        bootstrap: spec.bootstrap ?? false,
        created_by: spec.createdBy ?? null,
        created_at: spec.now,
        expires_at: spec.ttlMs ? new Date(spec.now.getTime() + spec.ttlMs) : null,
      })
      .returningAll()
      .executeTakeFirstOrThrow();
    return { token, info: toInfo(row) };
  }

  /** Whether a live token already holds this name (names are unique among live tokens). */
  async nameTaken(name: string): Promise<boolean> {
    const row = await this.db
      .selectFrom('access_tokens')
      .select('id')
      .where('name', '=', name)
      .where('revoked_at', 'is', null)
      .executeTakeFirst();
    return row !== undefined;
  }

  async findBySecret(secret: string): Promise<AccessTokenInfo | undefined> {
    const row = await this.db
      .selectFrom('access_tokens')
      .selectAll()
      .where('token_hash', '=', hashSecret(secret))
      .executeTakeFirst();
    return row && toInfo(row);
  }

  async check(secret: string, now: Date): Promise<AccessCheck> {
    const token = await this.findBySecret(secret);
    if (!token) return { ok: false, reason: 'unknown token' };
    if (token.revokedAt) return { ok: false, reason: 'token revoked', token };
    if (token.expiresAt && token.expiresAt.getTime() <= now.getTime())
      return { ok: false, reason: 'token expired', token };
    const last = this.stamped.get(token.id) ?? 0;
    if (now.getTime() - last > 60_000) {
      this.stamped.set(token.id, now.getTime());
      await this.db
        .updateTable('access_tokens')
        .set({ last_used_at: now })
        .where('id', '=', token.id)
        .execute();
    }
    return { ok: true, token };
  }

  /** Newest first; revoked ones only with `all`. */
  async list(opts: { all?: boolean } = {}): Promise<AccessTokenInfo[]> {
    let q = this.db.selectFrom('access_tokens').selectAll();
    if (!opts.all) q = q.where('revoked_at', 'is', null);
    const rows = await q.orderBy('created_at', 'desc').orderBy('id').limit(1000).execute();
    return rows.map(toInfo);
  }

  /** Revoke by id or by live name. Undefined when no such token; revoking twice keeps the first time. */
  async revoke(idOrName: string, now: Date): Promise<AccessTokenInfo | undefined> {
    const target = await this.db
      .selectFrom('access_tokens')
      .selectAll()
      .where((eb) =>
        eb.or([eb('id', '=', idOrName), eb.and([eb('name', '=', idOrName), eb('revoked_at', 'is', null)])]),
      )
      .orderBy('created_at', 'desc')
      .executeTakeFirst();
    if (!target) return undefined;
    const row = await this.db
      .updateTable('access_tokens')
      .set({ revoked_at: now })
      .where('id', '=', target.id)
      .where('revoked_at', 'is', null)
      .returningAll()
      .executeTakeFirst();
    return toInfo(row ?? target);
  }

  /** Removes a row this instance made a moment ago and never handed out (a lost bootstrap race). */
  async discard(id: string): Promise<void> {
    await this.db.deleteFrom('access_tokens').where('id', '=', id).execute();
  }
}
