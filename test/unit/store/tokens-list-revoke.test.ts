import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Store } from '../../../src/store/index.js';
import { freshStore } from '../../helpers/data-dir.js';

/** What `agent token list` and `agent token revoke` read and write. */

let store: Store;
let close: () => Promise<void>;
beforeAll(async () => {
  ({ store, close } = await freshStore());
});
afterAll(async () => close());

const T0 = new Date('2025-03-01T10:00:00.000Z');
const later = (ms: number) => new Date(T0.getTime() + ms);

describe('TokensRepo.list / revoke / last use', () => {
  it('lists static tokens by default, scaler and revoked ones with all, and never a secret', async () => {
    const st = await store.tokens.mint({ agentId: 'box-1', labels: ['linux'], kind: 'static', now: T0 });
    const eph = await store.tokens.mint({
      agentId: 'scaler-x',
      labels: ['linux'],
      kind: 'ephemeral',
      ttlMs: 60_000,
      now: later(1),
    });
    expect((await store.tokens.list()).map((t) => t.id)).toEqual([st.tokenId]);
    const all = await store.tokens.list({ all: true });
    expect(all.map((t) => t.id)).toEqual([eph.tokenId, st.tokenId]);
    expect(JSON.stringify(all)).not.toContain(st.token);
    expect(Object.keys(all[0]!).sort()).toEqual(
      ['agentId', 'createdAt', 'expiresAt', 'id', 'kind', 'labels', 'lastUsedAt', 'revokedAt'].sort(),
    );
    expect(all[1]!.lastUsedAt).toBeNull();
  });

  it('records the last use, and a revoked token stops checking at once', async () => {
    const st = await store.tokens.mint({ agentId: 'box-2', labels: ['gpu'], kind: 'static', now: T0 });
    const check = await store.tokens.check(st.token, later(5_000));
    expect(check.ok).toBe(true);
    // The session stamps the use after a good check, off the registration path.
    await store.tokens.stampUsed(st.tokenId, later(5_000));
    const listed = (await store.tokens.list()).find((t) => t.id === st.tokenId)!;
    expect(listed.lastUsedAt).toEqual(later(5_000));

    const revoked = await store.tokens.revoke(st.tokenId, later(6_000));
    expect(revoked).toMatchObject({ id: st.tokenId, agentId: 'box-2', revokedAt: later(6_000) });
    expect(await store.tokens.check(st.token, later(7_000))).toEqual({ ok: false, reason: 'token revoked' });
    expect((await store.tokens.list()).map((t) => t.id)).not.toContain(st.tokenId);
    expect((await store.tokens.staticScopes(later(7_000))).map((s) => s.agentId)).not.toContain('box-2');
    // Twice keeps the first time; an unknown id is undefined.
    expect((await store.tokens.revoke(st.tokenId, later(9_000)))?.revokedAt).toEqual(later(6_000));
    expect(await store.tokens.revoke('tok-none', later(9_000))).toBeUndefined();
  });
});
