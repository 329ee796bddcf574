/**
 * The claim store and the event cap lock on the embedded store (PGlite is PostgreSQL: the same
 * statements run on the external one, which test/system/event-cluster.test.ts covers).
 */
import { createHash } from 'node:crypto';
import fc from 'fast-check';
import { sql } from 'kysely';
import { afterEach, describe, expect, it } from 'vitest';
import { StoreClaimStore } from '../../../src/scaler/claim-store.js';
import { reserveEventSpawn } from '../../../src/scaler/event-cap.js';
import { ManualClock } from '../../../src/util/clock.js';
import { freshStore } from '../../helpers/data-dir.js';

let open: Awaited<ReturnType<typeof freshStore>> | undefined;
afterEach(async () => {
  await open?.close();
  open = undefined;
});

async function setup() {
  open = await freshStore();
  const clock = new ManualClock();
  const issuer = new StoreClaimStore(open.store, clock, { scalerName: 'cloud', claimTtlSeconds: 300 });
  // Any orchestrator redeems with a store that has no scaler name.
  const redeemer = new StoreClaimStore(open.store, clock);
  return { store: open.store, clock, issuer, redeemer };
}

const spec = {
  agentId: 'scaler-event-0000aaaa',
  labels: ['cloud', 'kici:agent:event', 'kici:scaler:cloud'],
  agentTokenTtlSeconds: 600,
  orchestratorUrl: 'ws://127.0.0.1:1/ws',
};

describe('claim store', () => {
  it('issues a 256-bit hex code and stores only its SHA-256 (plus a 12-char prefix)', async () => {
    const { store, issuer } = await setup();
    const code = await issuer.register(spec);
    expect(code).toMatch(/^[0-9a-f]{64}$/);
    const rows = await store.db.selectFrom('scaler_pending_claims').selectAll().execute();
    expect(rows).toHaveLength(1);
    expect(rows[0]!.claim_hash).toBe(createHash('sha256').update(code).digest('hex'));
    expect(rows[0]!.claim_prefix).toBe(code.slice(0, 12));
    expect(JSON.stringify(rows)).not.toContain(code);
  });

  it('redeems once for an ephemeral token scoped to the agent id and labels, valid for agentTokenTtlSeconds', async () => {
    const { store, clock, issuer, redeemer } = await setup();
    const code = await issuer.register(spec);
    const res = await redeemer.claim(code);
    if ('error' in res) throw new Error(res.error);
    expect(res).toMatchObject({
      agentId: spec.agentId,
      labels: spec.labels,
      orchestratorUrl: spec.orchestratorUrl,
    });
    const check = await store.tokens.check(res.agentToken, new Date(clock.now()));
    expect(check).toMatchObject({ ok: true, agentId: spec.agentId, labels: spec.labels, kind: 'ephemeral' });
    expect(await store.tokens.check(res.agentToken, new Date(clock.now() + 600_000))).toMatchObject({
      ok: false,
      reason: 'token expired',
    });
    expect(await redeemer.claim(code)).toEqual({ error: 'claim code already consumed' });
  });

  it('refuses a wrong code, an expired one and one issued for another agent id, each saying why', async () => {
    const { clock, issuer, redeemer } = await setup();
    expect(await redeemer.claim('f'.repeat(64))).toEqual({ error: 'invalid claim code' });
    expect(await redeemer.claim('not-hex')).toEqual({ error: 'invalid claim code' });
    const other = await issuer.register(spec);
    expect(await redeemer.claim(other, clock.now(), 'scaler-event-0000bbbb')).toEqual({
      error: 'claim code was issued for another agent id, not "scaler-event-0000bbbb"',
    });
    // Refused for the wrong id, the code is still good for its own agent.
    expect(await redeemer.claim(other, clock.now(), spec.agentId)).toMatchObject({ agentId: spec.agentId });
    const late = await issuer.register(spec);
    clock.advance(300_000);
    expect(await redeemer.claim(late)).toEqual({ error: 'claim code expired' });
    // The session's form of the same answer.
    expect(await redeemer.redeem(late, clock.now())).toEqual({ ok: false, reason: 'claim code expired' });
  });

  it('a reload TTL applies to codes issued afterwards; a redemption-only store cannot issue', async () => {
    const { clock, issuer, redeemer } = await setup();
    issuer.setDefaultTtlSeconds(10);
    const code = await issuer.register(spec);
    clock.advance(10_000);
    expect(await redeemer.claim(code)).toEqual({ error: 'claim code expired' });
    await expect(redeemer.register(spec)).rejects.toThrow(/requires a scalerName/);
  });

  it('concurrent redeems of one code mint exactly one token', async () => {
    const { issuer, redeemer } = await setup();
    const code = await issuer.register(spec);
    const results = await Promise.all(Array.from({ length: 8 }, () => redeemer.claim(code)));
    expect(results.filter((r) => 'agentToken' in r)).toHaveLength(1);
  });

  it('invalidate deletes the agent codes; purge drops expired ones', async () => {
    const { store, clock, issuer, redeemer } = await setup();
    const code = await issuer.register(spec);
    await issuer.register({ ...spec, agentId: 'scaler-event-0000cccc' });
    expect(await issuer.invalidate(spec.agentId)).toBe(1);
    expect(await redeemer.claim(code)).toEqual({ error: 'invalid claim code' });
    clock.advance(400_000);
    expect(await issuer.purgeExpired(new Date(clock.now()))).toBe(1);
    expect(await store.db.selectFrom('scaler_pending_claims').selectAll().execute()).toHaveLength(0);
  });
});

describe('withScalerCapLock (event cap)', () => {
  const record = (i: number, jobId: string | null = `j-${i}`) => ({
    agentId: `scaler-event-${String(i).padStart(8, '0')}`,
    scalerName: 'cloud',
    backendType: 'event',
    peerAdoptable: true,
    labelSet: ['cloud'],
    runId: null,
    boundJobId: jobId,
    ownerInstanceId: `inst-${i % 2}`,
    mandatoryLabels: [],
    spawnedAt: new Date(),
  });

  it('property: concurrent reservations never exceed maxAgents, and fill it when asked for enough', async () => {
    open = await freshStore();
    const db = open.store.db;
    let round = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 1, max: 5 }),
        fc.integer({ min: 1, max: 10 }),
        async (cap, callers) => {
          round++;
          await sql`delete from scaler_spawning_agents`.execute(db);
          await sql`delete from scaler_reservations`.execute(db);
          const entry = { name: 'cloud', maxAgents: cap };
          const outcomes = await Promise.all(
            Array.from({ length: callers }, (_, i) =>
              reserveEventSpawn(db, entry, record(round * 100 + i), { cpus: 0, memBytes: 0 }),
            ),
          );
          const granted = outcomes.filter((o) => o === undefined).length;
          expect(granted).toBe(Math.min(cap, callers));
          for (const o of outcomes.filter(Boolean))
            expect(o).toMatch(/cluster-wide cap \(\d+\/\d+ provisions\)/);
          const rows = await db.selectFrom('scaler_spawning_agents').select('agent_id').execute();
          expect(rows).toHaveLength(granted);
        },
      ),
      { numRuns: 15 },
    );
  });

  it('one provision per job, and other scalers and backend types do not count', async () => {
    open = await freshStore();
    const db = open.store.db;
    const entry = { name: 'cloud', maxAgents: 5 };
    expect(await reserveEventSpawn(db, entry, record(1, 'j-same'), { cpus: 0, memBytes: 0 })).toBeUndefined();
    expect(await reserveEventSpawn(db, entry, record(2, 'j-same'), { cpus: 0, memBytes: 0 })).toMatch(
      /already has a provision/,
    );
    await open.store.spawns.insertSpawn(
      { ...record(3), scalerName: 'bm', backendType: 'bare-metal', peerAdoptable: false },
      { cpus: 0, memBytes: 0 },
    );
    const tight = { name: 'cloud', maxAgents: 2 };
    expect(await reserveEventSpawn(db, tight, record(4), { cpus: 0, memBytes: 0 })).toBeUndefined();
    expect(await reserveEventSpawn(db, tight, record(5), { cpus: 0, memBytes: 0 })).toMatch(/2\/2/);
  });
});
