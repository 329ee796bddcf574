/**
 * A token this process stored with a spawn record is checked the first time from memory
 * (src/store/unused-tokens.ts): never a different answer from the store's, whatever was revoked,
 * prolonged or checked before, and no read for that first check.
 */
import fc from 'fast-check';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { Store } from '../../../src/store/index.js';
import { newToken, TokensRepo } from '../../../src/store/tokens-repo.js';
import { freshStore } from '../../helpers/data-dir.js';
import { countingStatements } from '../../helpers/statement-count.js';
import { wipeStore } from '../../helpers/store-per-file.js';

let store: Store;
let close: () => Promise<void>;
beforeAll(async () => {
  ({ store, close } = await freshStore());
});
afterAll(async () => close());
beforeEach(async () => wipeStore(store));

const T0 = new Date('2026-12-01T10:00:00.000Z');
const at = (ms: number) => new Date(T0.getTime() + ms);

/** A repo that keeps stored tokens, counting its statements, and one that always reads the store. */
function repos() {
  const { n, db } = countingStatements(store.db);
  return { n, kept: new TokensRepo(db, { keepUnused: true }), plain: new TokensRepo(store.db) };
}

/** A spawn's token: its row inserted as the spawn record's statement would, then told to `repo`. */
async function spawnToken(repo: TokensRepo, agentId: string, ttlMs = 60_000) {
  const minted = newToken({ agentId, labels: ['linux', 'x'], kind: 'ephemeral', ttlMs, now: T0 });
  await store.db.insertInto('agent_tokens').values(minted.row).execute();
  repo.stored(minted.row, T0);
  return minted;
}

describe('tokens kept until their first check', () => {
  it('the first check is answered without a read; the next one reads the store', async () => {
    const { n, kept } = repos();
    const m = await spawnToken(kept, 'scaler-a');
    const before = n.statements;
    const first = await kept.checkWithSession(m.token, at(1_000));
    expect(first.check).toEqual({
      ok: true,
      tokenId: m.tokenId,
      agentId: 'scaler-a',
      labels: ['linux', 'x'],
      kind: 'ephemeral',
    });
    expect(first.session).toBeUndefined();
    expect(n.statements).toBe(before);
    const second = await kept.checkWithSession(m.token, at(2_000));
    expect(second.check).toEqual(first.check);
    expect(n.statements).toBe(before + 1);
  });

  it('is refused once revoked, by id or by agent, and once expired', async () => {
    const { kept } = repos();
    const byId = await spawnToken(kept, 'scaler-b');
    await kept.revoke(byId.tokenId, at(10));
    expect((await kept.checkWithSession(byId.token, at(20))).check).toEqual({
      ok: false,
      reason: 'token revoked',
    });
    const byAgent = await spawnToken(kept, 'scaler-c');
    await kept.revokeForAgent('scaler-c', at(10));
    expect((await kept.checkWithSession(byAgent.token, at(20))).check).toEqual({
      ok: false,
      reason: 'token revoked',
    });
    const short = await spawnToken(kept, 'scaler-d', 1_000);
    expect((await kept.checkWithSession(short.token, at(1_000))).check).toEqual({
      ok: false,
      reason: 'token expired',
    });
  });

  it('keeps nothing where another process may revoke (PostgreSQL)', async () => {
    const counted = countingStatements(store.db);
    const onPg = new TokensRepo(counted.db);
    const m = await spawnToken(onPg, 'scaler-e');
    expect((await onPg.checkWithSession(m.token, at(1))).check.ok).toBe(true);
    expect(counted.n.statements).toBe(1);
  });

  it('property: every check answers as the store alone would, whatever came before it', async () => {
    const op = fc.oneof(
      fc.record({ kind: fc.constant('check' as const), who: fc.nat(2), atMs: fc.nat(90_000) }),
      fc.record({ kind: fc.constant('revoke' as const), who: fc.nat(2) }),
      fc.record({ kind: fc.constant('revoke-agent' as const), who: fc.nat(2) }),
      fc.record({ kind: fc.constant('prolong' as const), who: fc.nat(2), byMs: fc.nat(60_000) }),
    );
    await fc.assert(
      fc.asyncProperty(fc.array(op, { maxLength: 12 }), async (ops) => {
        await wipeStore(store);
        const { kept, plain } = repos();
        const tokens = [];
        for (let i = 0; i < 3; i++) tokens.push(await spawnToken(kept, `scaler-p${i}`, 30_000));
        for (const o of ops) {
          const t = tokens[o.who]!;
          if (o.kind === 'revoke') await kept.revoke(t.tokenId, at(5));
          else if (o.kind === 'revoke-agent') await kept.revokeForAgent(`scaler-p${o.who}`, at(5));
          else if (o.kind === 'prolong') await kept.prolong([`scaler-p${o.who}`], at(30_000 + o.byMs));
          else {
            // The store's own answer first: reading it changes nothing that is kept.
            const truth = await plain.checkWithSession(t.token, at(o.atMs));
            expect(await kept.checkWithSession(t.token, at(o.atMs))).toEqual(truth);
          }
        }
      }),
      { numRuns: 40 },
    );
  });
});
