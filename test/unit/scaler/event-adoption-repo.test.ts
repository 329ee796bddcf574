/**
 * Adoption of an event agent's spawn row is one conditional update (AdoptionRepo): of concurrent
 * adopters exactly one wins, the winner may adopt again, and local-backend rows never match. On the
 * real embedded store, as orchestrators share PostgreSQL (test/system/event-adoption-race.test.ts
 * races real instances).
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { AdoptionRepo } from '../../../src/store/adoption-repo.js';
import { A_TARGETS, insertRow, storePerTest } from '../../helpers/adoption-store.js';

const openStore = storePerTest();

describe('adoptSpawningAgent: one conditional update', () => {
  it('property: of N concurrent adopters exactly one wins; the winner may adopt again, the others never', async () => {
    const store = await openStore();
    const repo = new AdoptionRepo(store.db);
    let n = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 2, max: 6 }),
        fc.array(fc.nat({ max: 5 }), { minLength: 1, maxLength: 8 }),
        async (adopters, retries) => {
          const id = `scaler-event-p${++n}`;
          await insertRow(store, id);
          const names = Array.from({ length: adopters }, (_, i) => `orch-${i}`);
          const first = await Promise.all(names.map((who) => repo.adoptSpawningAgent(id, who, new Date())));
          const winners = names.filter((_, i) => first[i] !== null);
          expect(winners).toHaveLength(1);
          // Any later attempts, in any order: only the winner gets the row again.
          const later = await Promise.all(
            retries.map((r) => repo.adoptSpawningAgent(id, names[r % adopters]!, new Date())),
          );
          retries.forEach((r, i) =>
            expect(later[i] !== null, `retry by ${names[r % adopters]}`).toBe(
              names[r % adopters] === winners[0],
            ),
          );
          const row = await store.db
            .selectFrom('scaler_spawning_agents')
            .select('adopted_by')
            .where('agent_id', '=', id)
            .executeTakeFirstOrThrow();
          const outcome = await store.db
            .selectFrom('scaler_provision_outcomes')
            .select('adopted_by')
            .where('agent_id', '=', id)
            .executeTakeFirstOrThrow();
          expect(row.adopted_by).toBe(winners[0]);
          expect(outcome.adopted_by).toBe(winners[0]);
        },
      ),
      { numRuns: 25 },
    );
  });

  it('a re-adoption by the same instance says the agent registered before (no bound job again)', async () => {
    const store = await openStore();
    const repo = new AdoptionRepo(store.db);
    await insertRow(store, 'scaler-event-again001', { boundJobId: 'j-1' });
    const one = await repo.adoptSpawningAgent('scaler-event-again001', 'orch-b', new Date(1_000));
    const two = await repo.adoptSpawningAgent('scaler-event-again001', 'orch-b', new Date(2_000));
    expect(one).toMatchObject({ boundJobId: 'j-1', registeredBefore: false, provisioningTargets: A_TARGETS });
    expect(two).toMatchObject({ registeredBefore: true });
  });

  it('local-backend rows never match, whoever asks', async () => {
    const store = await openStore();
    const repo = new AdoptionRepo(store.db);
    for (const t of ['bare-metal', 'container', 'firecracker']) {
      await insertRow(store, `scaler-${t}-local001`, { backendType: t });
      expect(await repo.adoptSpawningAgent(`scaler-${t}-local001`, 'orch-b', new Date())).toBeNull();
      expect(await repo.adoptSpawningAgent(`scaler-${t}-local001`, 'orch-a', new Date())).toBeNull();
    }
  });
});
