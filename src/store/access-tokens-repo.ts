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

/** How many live tokens a check may keep (a bound, not a working size: operators hold a few). */
const CACHED_TOKENS = 1_000;

export interface AccessTokensOptions {
  /**
   * Keep a live token this long after reading it, so an API call does not read its row first. Only
   * where this process is the database's one writer (the embedded store): every revoke goes through
   * here and clears what is kept. 0 (on PostgreSQL) reads the row on every check, so a revoke on
   * one instance refuses the token on all of them at their next request.
   */
  keepLiveMs?: number;
  /** Monotonic ms, for how long a kept token stays kept (default: performance.now). */
  monotonicNow?: () => number;
}

/** Operators' access tokens, shared by every instance on the database. */
export class AccessTokensRepo {
  /** Last-used stamps are written at most this often per token, so reads stay reads. */
  private readonly stamped = new Map<string, number>();
  /** Live tokens by secret hash, with when they stop being kept (see keepLiveMs). */
  private readonly live = new Map<string, { token: AccessTokenInfo; until: number }>();
  private readonly keepLiveMs: number;
  private readonly monotonicNow: () => number;

  constructor(
    private readonly db: Kysely<Database>,
    opts: AccessTokensOptions = {},
  ) {
    this.keepLiveMs = opts.keepLiveMs ?? 0;
    this.monotonicNow = opts.monotonicNow ?? (() => performance.now());
  }

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
    return this.findByHash(hashSecret(secret));
  }

  private async findByHash(hash: string): Promise<AccessTokenInfo | undefined> {
    const row = await this.db
      .selectFrom('access_tokens')
      .selectAll()
      .where('token_hash', '=', hash)
      .executeTakeFirst();
    return row && toInfo(row);
  }

  /** The token a secret names: kept if live and read within keepLiveMs, else its row. */
  private async lookUp(secret: string): Promise<AccessTokenInfo | undefined> {
    const hash = hashSecret(secret);
    const at = this.monotonicNow();
    const kept = this.live.get(hash);
    if (kept && kept.until > at) return kept.token;
    this.live.delete(hash);
    const token = await this.findByHash(hash);
    // Only live tokens are kept: an unknown secret costs a read every time, and fills nothing.
    if (token && !token.revokedAt && this.keepLiveMs > 0) {
      if (this.live.size >= CACHED_TOKENS) this.live.clear();
      this.live.set(hash, { token, until: at + this.keepLiveMs });
    }
    return token;
  }

  async check(secret: string, now: Date): Promise<AccessCheck> {
    const token = await this.lookUp(secret);
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
    // Cleared before the write: no check from here on can take the token from what was kept.
    this.live.clear();
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
    this.live.clear();
    await this.db.deleteFrom('access_tokens').where('id', '=', id).execute();
  }
}
