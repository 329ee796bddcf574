import { createHash, randomBytes } from 'node:crypto';
import type { Insertable, Kysely, Selectable } from 'kysely';
import type { AgentTokensTable, Database } from './schema.js';
import type { SessionRecord } from './sessions-repo.js';
import { UnusedTokens } from './unused-tokens.js';

export type TokenKind = 'static' | 'ephemeral';

export type TokenCheck =
  | { ok: true; tokenId: string; agentId: string; labels: string[]; kind: TokenKind }
  | { ok: false; reason: string };

/** What an operator may see of a token: never its secret nor its hash. */
export interface TokenInfo {
  id: string;
  agentId: string;
  labels: string[];
  kind: TokenKind;
  createdAt: Date;
  expiresAt: Date | null;
  revokedAt: Date | null;
  lastUsedAt: Date | null;
}

const INFO_COLUMNS = [
  'id',
  'agent_id',
  'labels',
  'kind',
  'created_at',
  'expires_at',
  'revoked_at',
  'last_used_at',
] as const;

type InfoRow = Pick<
  Selectable<AgentTokensTable>,
  'id' | 'agent_id' | 'labels' | 'kind' | 'created_at' | 'expires_at' | 'revoked_at' | 'last_used_at'
>;

function toInfo(r: InfoRow): TokenInfo {
  return {
    id: r.id,
    agentId: r.agent_id,
    labels: r.labels,
    kind: r.kind as TokenKind,
    createdAt: r.created_at,
    expiresAt: r.expires_at,
    revokedAt: r.revoked_at,
    lastUsedAt: r.last_used_at,
  };
}

export function hashSecret(secret: string): string {
  return createHash('sha256').update(secret).digest('hex');
}

export interface TokenSpec {
  agentId: string;
  labels: string[];
  kind: TokenKind;
  ttlMs?: number | undefined;
  now: Date;
}

export interface MintedToken {
  token: string;
  tokenId: string;
  expiresAt: Date | null;
  /** The row to store: the token's hash, never the token. */
  row: Insertable<AgentTokensTable>;
}

/** A fresh token and the row that stores it, for a caller that writes the row with others. */
export function newToken(spec: TokenSpec): MintedToken {
  const token = `kici_${randomBytes(32).toString('base64url')}`;
  const tokenId = `tok-${randomBytes(6).toString('hex')}`;
  const expiresAt = spec.ttlMs ? new Date(spec.now.getTime() + spec.ttlMs) : null;
  const row = {
    id: tokenId,
    token_hash: hashSecret(token),
    agent_id: spec.agentId,
    labels: JSON.stringify(spec.labels),
    kind: spec.kind,
    expires_at: expiresAt,
    created_at: spec.now,
  };
  return { token, tokenId, expiresAt, row };
}

function judge(row: Selectable<AgentTokensTable> | undefined, now: Date): TokenCheck {
  if (!row || row.kind === 'admin') return { ok: false, reason: 'unknown token' };
  if (row.revoked_at) return { ok: false, reason: 'token revoked' };
  if (row.expires_at && row.expires_at.getTime() <= now.getTime())
    return { ok: false, reason: 'token expired' };
  return { ok: true, tokenId: row.id, agentId: row.agent_id, labels: row.labels, kind: row.kind };
}

/**
 * Agent tokens. Only a SHA-256 of each token is stored; the raw value is returned once at mint time.
 * A token is bound to one agent id and its full label set, and may expire.
 */
export class TokensRepo {
  private readonly unused: UnusedTokens;

  /** `keepUnused`: this process is the store's one writer (the embedded database; see unused-tokens.ts). */
  constructor(
    private readonly db: Kysely<Database>,
    opts: { keepUnused?: boolean } = {},
  ) {
    this.unused = new UnusedTokens(opts.keepUnused ?? false);
  }

  /** A token stored by a caller that writes the row with others (a spawn's): its first check needs no read. */
  stored(row: Insertable<AgentTokensTable>, now: Date): void {
    this.unused.keep(row, now);
  }

  /** Read-only: a token given to `stored` is answered from memory (the embedded store's one writer). */
  get keepsUnused(): boolean {
    return this.unused.enabled;
  }

  /** The stored row (with the token's hash) stays here: callers get the token and its facts only. */
  async mint(spec: TokenSpec): Promise<Omit<MintedToken, 'row'>> {
    const { row, ...minted } = newToken(spec);
    await this.db.insertInto('agent_tokens').values(row).execute();
    return minted;
  }

  async check(token: string, now: Date): Promise<TokenCheck> {
    const row = await this.db
      .selectFrom('agent_tokens')
      .selectAll()
      .where('token_hash', '=', hashSecret(token))
      .executeTakeFirst();
    return judge(row, now);
  }

  /**
   * A registration's check: the token, and the session of the agent it names, in one read (on the
   * embedded database every call is a hop on the way from an agent's hello to its job).
   */
  async checkWithSession(
    token: string,
    now: Date,
  ): Promise<{ check: TokenCheck; session: SessionRecord | undefined }> {
    // A kept token was never checked, so no session can have been opened with it.
    const kept = this.unused.take(hashSecret(token));
    if (kept) return { check: judge(kept, now), session: undefined };
    const row = await this.db
      .selectFrom('agent_tokens as t')
      .leftJoin('agent_sessions as s', 's.agent_id', 't.agent_id')
      .selectAll('t')
      .select(['s.secret_hash', 's.jobs_taken'])
      .where('t.token_hash', '=', hashSecret(token))
      .executeTakeFirst();
    const check = judge(row, now);
    const session =
      check.ok && row?.secret_hash != null
        ? { secretHash: row.secret_hash, jobsTaken: row.jobs_taken ?? 0 }
        : undefined;
    return { check, session };
  }

  /**
   * Moves the end of these agents' single-use tokens out to `until`, never in: an agent whose job
   * outlives its token's first lifetime can still come back after a dropped connection or a restart
   * of the orchestrator. Static tokens keep the lifetime their operator gave them; revoked ones stay
   * revoked. Returns how many were moved.
   */
  async prolong(agentIds: readonly string[], until: Date): Promise<number> {
    if (!agentIds.length) return 0;
    this.unused.drop({ agentIds });
    const res = await this.db
      .updateTable('agent_tokens')
      .set({ expires_at: until })
      .where('agent_id', 'in', [...agentIds])
      .where('kind', '=', 'ephemeral')
      .where('revoked_at', 'is', null)
      .where('expires_at', 'is not', null)
      .where('expires_at', '<', until)
      .executeTakeFirst();
    return Number(res.numUpdatedRows);
  }

  /** When a token last let an agent in (`agent token list`). */
  async stampUsed(tokenId: string, now: Date): Promise<void> {
    await this.db.updateTable('agent_tokens').set({ last_used_at: now }).where('id', '=', tokenId).execute();
  }

  /**
   * Tokens for `agent token list`, newest first. By default only live static ones (expired ones
   * included, so an operator sees why an agent is refused); `all` adds scaler tokens and revoked ones.
   */
  async list(opts: { all?: boolean; limit?: number } = {}): Promise<TokenInfo[]> {
    let q = this.db.selectFrom('agent_tokens').select(INFO_COLUMNS).where('kind', '!=', 'admin');
    if (!opts.all) q = q.where('kind', '=', 'static').where('revoked_at', 'is', null);
    const rows = await q
      .orderBy('created_at', 'desc')
      .orderBy('id')
      .limit(opts.limit ?? 1000)
      .execute();
    return rows.map(toInfo);
  }

  /** Revoke one token by id. Undefined when no such agent token exists; revoking twice keeps the first time. */
  async revoke(id: string, now: Date): Promise<TokenInfo | undefined> {
    this.unused.drop({ ids: [id] });
    await this.db
      .updateTable('agent_tokens')
      .set({ revoked_at: now })
      .where('id', '=', id)
      .where('kind', '!=', 'admin')
      .where('revoked_at', 'is', null)
      .execute();
    const row = await this.db
      .selectFrom('agent_tokens')
      .select(INFO_COLUMNS)
      .where('id', '=', id)
      .where('kind', '!=', 'admin')
      .executeTakeFirst();
    return row && toInfo(row);
  }

  /** Label scopes of the live static tokens: agents that may connect at any time. */
  async staticScopes(now: Date): Promise<{ agentId: string; labels: string[]; expiresAt: Date | null }[]> {
    const rows = await this.db
      .selectFrom('agent_tokens')
      .select(['agent_id', 'labels', 'expires_at'])
      .where('kind', '=', 'static')
      .where('revoked_at', 'is', null)
      .execute();
    return rows
      .filter((r) => !r.expires_at || r.expires_at.getTime() > now.getTime())
      .map((r) => ({ agentId: r.agent_id, labels: r.labels, expiresAt: r.expires_at }));
  }

  /**
   * A new token for the same static agent and labels, with the old token's lifetime; the old one
   * stays valid for `graceMs` more (never longer than it already had). Undefined when `id` is not
   * a live static token.
   */
  async rotate(
    id: string,
    now: Date,
    graceMs: number,
  ): Promise<{ old: TokenInfo; token: string; tokenId: string; expiresAt: Date | null } | undefined> {
    const row = await this.db
      .selectFrom('agent_tokens')
      .selectAll()
      .where('id', '=', id)
      .where('kind', '=', 'static')
      .where('revoked_at', 'is', null)
      .executeTakeFirst();
    if (!row || (row.expires_at && row.expires_at.getTime() <= now.getTime())) return undefined;
    const lifetimeMs = row.expires_at ? row.expires_at.getTime() - row.created_at.getTime() : undefined;
    const minted = await this.mint({
      agentId: row.agent_id,
      labels: row.labels,
      kind: 'static',
      ttlMs: lifetimeMs,
      now,
    });
    const graceEnd = new Date(now.getTime() + graceMs);
    const oldEnd = row.expires_at && row.expires_at < graceEnd ? row.expires_at : graceEnd;
    await this.db.updateTable('agent_tokens').set({ expires_at: oldEnd }).where('id', '=', id).execute();
    return { old: toInfo({ ...row, expires_at: oldEnd }), ...minted };
  }

  /** Live static tokens that expire within `withinMs` (the `kici_orch_agent_tokens_expiring` gauge). */
  async countExpiring(now: Date, withinMs: number): Promise<number> {
    const row = await this.db
      .selectFrom('agent_tokens')
      .select((eb) => eb.fn.countAll<string>().as('n'))
      .where('kind', '=', 'static')
      .where('revoked_at', 'is', null)
      .where('expires_at', '>', now)
      .where('expires_at', '<=', new Date(now.getTime() + withinMs))
      .executeTakeFirstOrThrow();
    return Number(row.n);
  }

  /**
   * Revoke every live scaler-agent token that no spawn record backs (any instance's). A token is
   * only ever written with its record, so one without is a teardown cut short between its two
   * writes: nothing can reap its agent, and the token would let it back in until it expired.
   * Returns the agents whose tokens went.
   */
  async revokeUnbacked(now: Date): Promise<string[]> {
    const rows = await this.db
      .updateTable('agent_tokens')
      .set({ revoked_at: now })
      .where('kind', '=', 'ephemeral')
      .where('revoked_at', 'is', null)
      .where('agent_id', 'like', 'scaler-%')
      .where(({ not, exists, selectFrom }) =>
        not(
          exists(
            selectFrom('scaler_spawning_agents')
              .select('scaler_spawning_agents.agent_id')
              .whereRef('scaler_spawning_agents.agent_id', '=', 'agent_tokens.agent_id'),
          ),
        ),
      )
      .returning('agent_id')
      .execute();
    const agentIds = [...new Set(rows.map((r) => r.agent_id))];
    if (agentIds.length) this.unused.drop({ agentIds });
    return agentIds;
  }

  async revokeForAgent(agentId: string, now: Date): Promise<void> {
    this.unused.drop({ agentIds: [agentId] });
    await this.db
      .updateTable('agent_tokens')
      .set({ revoked_at: now })
      .where('agent_id', '=', agentId)
      .where('kind', '=', 'ephemeral')
      .where('revoked_at', 'is', null)
      .execute();
  }
}
