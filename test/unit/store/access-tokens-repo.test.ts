/**
 * Access tokens in the store: expiry and revocation bite at once. Where this process is the store's
 * one writer a live token is kept between calls; elsewhere every call reads the row.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { AccessTokensRepo } from '../../../src/store/access-tokens-repo.js';
import { freshStore } from '../../helpers/data-dir.js';
import { countingStatements } from '../../helpers/statement-count.js';

let fresh: Awaited<ReturnType<typeof freshStore>>;
beforeEach(async () => {
  fresh = await freshStore();
});
afterEach(async () => {
  await fresh.close();
});

describe('AccessTokensRepo', () => {
  it('keeps only a hash, and refuses an expired or revoked token naming why', async () => {
    const repo = fresh.store.accessTokens;
    const t0 = new Date('2026-01-01T00:00:00Z');
    const made = await repo.create({ name: 'dash', role: 'viewer', now: t0, ttlMs: 60_000 });
    const row = await fresh.store.db.selectFrom('access_tokens').selectAll().executeTakeFirstOrThrow();
    expect(JSON.stringify(row)).not.toContain(made.token);
    expect((await repo.check(made.token, new Date(t0.getTime() + 59_999))).ok).toBe(true);
    const late = await repo.check(made.token, new Date(t0.getTime() + 60_000));
    expect(late).toMatchObject({ ok: false, reason: 'token expired' });
    const other = await repo.create({ name: 'ci', role: 'operator', now: t0 });
    await repo.revoke('ci', t0);
    expect(await repo.check(other.token, t0)).toMatchObject({ ok: false, reason: 'token revoked' });
    expect(await repo.check('kici_at_nothing', t0)).toMatchObject({ ok: false, reason: 'unknown token' });
    // The name is free again once its token is revoked.
    expect(await repo.nameTaken('ci')).toBe(false);
    expect(await repo.nameTaken('dash')).toBe(true);
  });

  /** A repo over the test's store that counts the statements it sends. */
  function counted(opts: ConstructorParameters<typeof AccessTokensRepo>[1]) {
    const { n, db } = countingStatements(fresh.store.db);
    return { n, repo: new AccessTokensRepo(db, opts) };
  }
  const revokeBehindItsBack = (id: string, at: Date) =>
    fresh.store.db.updateTable('access_tokens').set({ revoked_at: at }).where('id', '=', id).execute();

  it('the embedded store keeps a live token between calls, and a revoke refuses it at once', async () => {
    const { n, repo } = counted({ keepLiveMs: 10_000 });
    const t0 = new Date('2026-01-01T00:00:00Z');
    const made = await repo.create({ name: 'ci', role: 'operator', now: t0, ttlMs: 60_000 });
    expect((await repo.check(made.token, t0)).ok).toBe(true);
    const before = n.statements;
    expect((await repo.check(made.token, new Date(t0.getTime() + 1_000))).ok).toBe(true);
    expect(n.statements).toBe(before); // no read: it was kept
    // Expiry is still checked on every call, kept or not.
    expect(await repo.check(made.token, new Date(t0.getTime() + 60_000))).toMatchObject({
      ok: false,
      reason: 'token expired',
    });
    await repo.revoke('ci', t0);
    expect(await repo.check(made.token, t0)).toMatchObject({ ok: false, reason: 'token revoked' });
    // An unknown secret is read every time: it is never kept.
    const reads = n.statements;
    await repo.check('kici_at_nothing', t0);
    await repo.check('kici_at_nothing', t0);
    expect(n.statements).toBe(reads + 2);
  });

  it('a kept token is read again once its time is up', async () => {
    let mono = 0;
    const { repo } = counted({ keepLiveMs: 10_000, monotonicNow: () => mono });
    const t0 = new Date('2026-01-01T00:00:00Z');
    const made = await repo.create({ name: 'ci', role: 'operator', now: t0 });
    expect((await repo.check(made.token, t0)).ok).toBe(true);
    await revokeBehindItsBack(made.info.id, t0);
    mono = 10_001;
    expect(await repo.check(made.token, t0)).toMatchObject({ ok: false, reason: 'token revoked' });
  });

  it('on PostgreSQL (nothing kept) a revoke made by another instance refuses the token at the next call', async () => {
    const { n, repo } = counted({ keepLiveMs: 0 });
    const t0 = new Date('2026-01-01T00:00:00Z');
    const made = await repo.create({ name: 'ci', role: 'operator', now: t0 });
    expect((await repo.check(made.token, t0)).ok).toBe(true);
    const before = n.statements;
    await revokeBehindItsBack(made.info.id, t0);
    expect(await repo.check(made.token, t0)).toMatchObject({ ok: false, reason: 'token revoked' });
    expect(n.statements).toBeGreaterThan(before);
  });
});
