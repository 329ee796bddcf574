import { createHash } from 'node:crypto';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hashSecret, type Store } from '../../../src/store/index.js';
import { freshStore } from '../../helpers/data-dir.js';

let store: Store;
let close: () => Promise<void>;
beforeAll(async () => {
  ({ store, close } = await freshStore());
});
afterAll(async () => close());

let counter = 0;
const uid = (p: string) => `${p}-${++counter}`;

const T0 = new Date('2025-03-01T10:00:00.000Z');
const later = (ms: number) => new Date(T0.getTime() + ms);

describe('TokensRepo.mint', () => {
  it('returns the raw token once and stores only its sha256', async () => {
    const agentId = uid('agent');
    const minted = await store.tokens.mint({
      agentId,
      labels: ['linux', 'kici:scaler:a'],
      kind: 'ephemeral',
      ttlMs: 60_000,
      now: T0,
    });
    expect(minted.token).toMatch(/^kici_[A-Za-z0-9_-]{43}$/);
    expect(minted.expiresAt?.getTime()).toBe(T0.getTime() + 60_000);

    const rows = await store.db
      .selectFrom('agent_tokens')
      .selectAll()
      .where('agent_id', '=', agentId)
      .execute();
    expect(rows).toHaveLength(1);
    const row = rows[0]!;
    expect(row.id).toBe(minted.tokenId);
    expect(row.token_hash).toBe(createHash('sha256').update(minted.token).digest('hex'));
    expect(row.token_hash).toBe(hashSecret(minted.token));
    // Neither the token nor its secret part appears anywhere in the stored row.
    const stored = JSON.stringify(row);
    expect(stored).not.toContain(minted.token);
    expect(stored).not.toContain(minted.token.slice('kici_'.length));
    expect(row).toMatchObject({
      agent_id: agentId,
      labels: ['linux', 'kici:scaler:a'],
      kind: 'ephemeral',
      revoked_at: null,
    });
  });

  it('mints a different token every time, even for the same agent', async () => {
    const agentId = uid('agent');
    const a = await store.tokens.mint({ agentId, labels: [], kind: 'static', now: T0 });
    const b = await store.tokens.mint({ agentId, labels: [], kind: 'static', now: T0 });
    expect(a.token).not.toBe(b.token);
    expect(a.tokenId).not.toBe(b.tokenId);
    expect(a.expiresAt).toBeNull();
  });
});

describe('TokensRepo.check', () => {
  it('accepts a valid token and reports what it is bound to', async () => {
    const agentId = uid('agent');
    const { token, tokenId } = await store.tokens.mint({
      agentId,
      labels: ['linux', 'gpu'],
      kind: 'static',
      now: T0,
    });
    expect(await store.tokens.check(token, later(365 * 24 * 3600_000))).toEqual({
      ok: true,
      tokenId,
      agentId,
      labels: ['linux', 'gpu'],
      kind: 'static',
    });
  });

  it('does not know a token it never minted, or a near miss of one it did', async () => {
    const { token } = await store.tokens.mint({ agentId: uid('agent'), labels: [], kind: 'static', now: T0 });
    expect(await store.tokens.check('kici_not-a-real-token', T0)).toEqual({
      ok: false,
      reason: 'unknown token',
    });
    expect(await store.tokens.check(`${token}x`, T0)).toEqual({ ok: false, reason: 'unknown token' });
    expect(await store.tokens.check(token.toUpperCase(), T0)).toEqual({ ok: false, reason: 'unknown token' });
    expect(await store.tokens.check(hashSecret(token), T0)).toEqual({ ok: false, reason: 'unknown token' });
  });

  it('expires a token at its expiry instant, not before', async () => {
    const { token } = await store.tokens.mint({
      agentId: uid('agent'),
      labels: [],
      kind: 'ephemeral',
      ttlMs: 1000,
      now: T0,
    });
    expect((await store.tokens.check(token, later(999))).ok).toBe(true);
    expect(await store.tokens.check(token, later(1000))).toEqual({ ok: false, reason: 'token expired' });
    expect(await store.tokens.check(token, later(86_400_000))).toEqual({
      ok: false,
      reason: 'token expired',
    });
  });

  it('does not accept an admin token as an agent token', async () => {
    const secret = `kici_admin_${uid('s')}`;
    await store.db
      .insertInto('agent_tokens')
      .values({
        id: uid('tok'),
        token_hash: hashSecret(secret),
        agent_id: 'admin',
        labels: '[]',
        kind: 'admin',
        created_at: T0,
      })
      .execute();
    expect(await store.tokens.check(secret, T0)).toEqual({ ok: false, reason: 'unknown token' });
  });
});

describe('TokensRepo.checkWithSession', () => {
  it('answers like check, with the session of the agent the token names, in one read', async () => {
    const agentId = uid('agent');
    const minted = await store.tokens.mint({ agentId, labels: ['linux'], kind: 'static', now: T0 });
    const bare = await store.tokens.checkWithSession(minted.token, T0);
    expect(bare.check).toEqual(await store.tokens.check(minted.token, T0));
    expect(bare.session).toBeUndefined();

    expect(await store.sessions.open(agentId, 'hash-1', null)).toBe(true);
    // Another agent's session is never the answer.
    expect(await store.sessions.open(uid('other'), 'hash-other', null)).toBe(true);
    const withSession = await store.tokens.checkWithSession(minted.token, T0);
    expect(withSession.check).toMatchObject({ ok: true, agentId });
    expect(withSession.session).toEqual({ secretHash: 'hash-1', jobsTaken: 0 });
  });

  it('gives no session with a token it refuses', async () => {
    const agentId = uid('agent');
    const minted = await store.tokens.mint({ agentId, labels: [], kind: 'ephemeral', ttlMs: 1_000, now: T0 });
    expect(await store.sessions.open(agentId, 'hash-2', null)).toBe(true);
    const expired = await store.tokens.checkWithSession(minted.token, later(1_000));
    expect(expired).toEqual({ check: { ok: false, reason: 'token expired' }, session: undefined });
    const unknown = await store.tokens.checkWithSession(`${minted.token}x`, T0);
    expect(unknown).toEqual({ check: { ok: false, reason: 'unknown token' }, session: undefined });
  });
});

describe('SessionsRepo.open', () => {
  it.each([false, true])(
    'lets only the first open of an agent win (sync deferred to the next commit: %s)',
    async (syncedByNext) => {
      const agentId = uid('agent');
      expect(await store.sessions.open(agentId, 'first', null, { syncedByNext })).toBe(true);
      expect(await store.sessions.open(agentId, 'second', null, { syncedByNext })).toBe(false);
      const rows = await store.db
        .selectFrom('agent_sessions')
        .selectAll()
        .where('agent_id', '=', agentId)
        .execute();
      expect(rows.map((r) => r.secret_hash)).toEqual(['first']);
    },
  );

  it('defers the sync of that one commit only: the next statement commits synced again', async () => {
    const show = async () =>
      (await sql<{ synchronous_commit: string }>`show synchronous_commit`.execute(store.db)).rows[0]!
        .synchronous_commit;
    const before = await show();
    expect(before).toBe('on');
    expect(await store.sessions.open(uid('agent'), 'h', null, { syncedByNext: true })).toBe(true);
    expect(await show()).toBe(before);
  });
});

describe('TokensRepo.revokeForAgent', () => {
  it("revokes the agent's single-use tokens and leaves its static ones and other agents alone", async () => {
    const agentId = uid('agent');
    const other = uid('agent');
    const eph1 = await store.tokens.mint({
      agentId,
      labels: [],
      kind: 'ephemeral',
      ttlMs: 3600_000,
      now: T0,
    });
    const eph2 = await store.tokens.mint({
      agentId,
      labels: [],
      kind: 'ephemeral',
      ttlMs: 3600_000,
      now: T0,
    });
    const stat = await store.tokens.mint({ agentId, labels: [], kind: 'static', now: T0 });
    const otherEph = await store.tokens.mint({
      agentId: other,
      labels: [],
      kind: 'ephemeral',
      ttlMs: 3600_000,
      now: T0,
    });

    await store.tokens.revokeForAgent(agentId, later(10));
    expect(await store.tokens.check(eph1.token, later(20))).toEqual({ ok: false, reason: 'token revoked' });
    expect(await store.tokens.check(eph2.token, later(20))).toEqual({ ok: false, reason: 'token revoked' });
    expect((await store.tokens.check(stat.token, later(20))).ok).toBe(true);
    expect((await store.tokens.check(otherEph.token, later(20))).ok).toBe(true);
  });

  it('keeps the first revocation time when revoked again', async () => {
    const agentId = uid('agent');
    const { tokenId } = await store.tokens.mint({
      agentId,
      labels: [],
      kind: 'ephemeral',
      ttlMs: 3600_000,
      now: T0,
    });
    await store.tokens.revokeForAgent(agentId, later(10));
    await store.tokens.revokeForAgent(agentId, later(5000));
    const row = await store.db
      .selectFrom('agent_tokens')
      .select('revoked_at')
      .where('id', '=', tokenId)
      .executeTakeFirstOrThrow();
    expect(row.revoked_at?.getTime()).toBe(later(10).getTime());
  });
});

describe('TokensRepo.prolong', () => {
  const mint = async (kind: 'ephemeral' | 'static', ttlMs?: number) => {
    const agentId = uid('agent');
    return { agentId, ...(await store.tokens.mint({ agentId, labels: ['linux'], kind, ttlMs, now: T0 })) };
  };
  const endOf = async (tokenId: string) =>
    (
      await store.db
        .selectFrom('agent_tokens')
        .select('expires_at')
        .where('id', '=', tokenId)
        .executeTakeFirst()
    )?.expires_at?.getTime() ?? null;

  it("moves a single-use agent's token end out, and checks pass after its first end; an expired one comes back", async () => {
    const t = await mint('ephemeral', 1_000);
    expect(await store.tokens.check(t.token, later(5_000))).toMatchObject({
      ok: false,
      reason: 'token expired',
    });
    expect(await store.tokens.prolong([t.agentId], later(10_000))).toBe(1);
    expect(await endOf(t.tokenId)).toBe(later(10_000).getTime());
    expect(await store.tokens.check(t.token, later(5_000))).toMatchObject({ ok: true, tokenId: t.tokenId });
  });

  it('never moves an end in, and leaves static, endless and revoked tokens as they are', async () => {
    const long = await mint('ephemeral', 60_000);
    const fixed = await mint('static', 1_000);
    const endless = await mint('ephemeral');
    const revoked = await mint('ephemeral', 1_000);
    await store.tokens.revoke(revoked.tokenId, T0);
    const ids = [long.agentId, fixed.agentId, endless.agentId, revoked.agentId];
    expect(await store.tokens.prolong(ids, later(10_000))).toBe(0);
    expect(await endOf(long.tokenId)).toBe(later(60_000).getTime());
    expect(await endOf(fixed.tokenId)).toBe(later(1_000).getTime());
    expect(await endOf(endless.tokenId)).toBeNull();
    expect(await store.tokens.check(revoked.token, later(500))).toMatchObject({
      ok: false,
      reason: 'token revoked',
    });
  });

  it('does nothing for no ids', async () => {
    expect(await store.tokens.prolong([], later(10_000))).toBe(0);
  });
});
