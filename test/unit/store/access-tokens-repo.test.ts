/** Access tokens in the store: checked on every call against the row, so expiry and revocation bite at once. */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { freshStore } from '../../helpers/data-dir.js';

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
});
