/**
 * Registration through adoption: a ScalerManager of another instance, sharing the spawner's store,
 * adopts an event agent with the row's gate and bound job, refuses a second adopter and local-backend
 * agents, and counts a failed lookup (test/system/event-adoption-handover.test.ts runs the same
 * across processes).
 */
import { sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import { Registry } from 'prom-client';
import { RegistrationRefused, ScalerAdoptionLookupError } from '../../../src/scaler/manager.js';
import { EventMetrics } from '../../../src/server/event-metrics.js';
import { insertRow, instanceManager, storePerTest } from '../../helpers/adoption-store.js';

const openStore = storePerTest();

describe('registration through adoption (ScalerManager)', () => {
  it("stamps the row's gate, not this instance's config, and hands over the bound job", async () => {
    const store = await openStore();
    await insertRow(store, 'scaler-event-gate0001', {
      gate: ['secure', 'kici:platform:x'],
      boundJobId: 'j-9',
    });
    const b = instanceManager(store, 'orch-b', { configured: true });
    const res = await b.m.registerAgent('scaler-event-gate0001');
    expect(res).toMatchObject({
      scalerName: 'cloud',
      gate: ['secure', 'kici:platform:x'],
      boundJobId: 'j-9',
    });
    // Configured here: in the manager's index, registered, counted against this instance's caps.
    expect(b.m.state.agents.get('scaler-event-gate0001')?.phase).toBe('registered');
    const c = instanceManager(store, 'orch-c', { configured: false });
    await insertRow(store, 'scaler-event-gate0002', { gate: ['gpu-only'] });
    expect(await c.m.registerAgent('scaler-event-gate0002')).toMatchObject({
      gate: ['gpu-only'],
      warm: true,
    });
  });

  it('a second instance is refused, naming the adopter; the adopter may register the agent again', async () => {
    const store = await openStore();
    await insertRow(store, 'scaler-event-twice001');
    const b = instanceManager(store, 'orch-b', { configured: false });
    const c = instanceManager(store, 'orch-c', { configured: true });
    await b.m.registerAgent('scaler-event-twice001');
    await expect(c.m.registerAgent('scaler-event-twice001')).rejects.toThrow(
      /already adopted by orchestrator "orch-b"/,
    );
    expect(c.m.state.agents.has('scaler-event-twice001')).toBe(false);
    await expect(b.m.registerAgent('scaler-event-twice001')).resolves.toMatchObject({ scalerName: 'cloud' });
  });

  it('a local-backend agent reaching another instance is refused and its row left alone', async () => {
    const store = await openStore();
    await insertRow(store, 'scaler-bare-metal-wrong001', { backendType: 'bare-metal' });
    const b = instanceManager(store, 'orch-b', { configured: true });
    const err = await b.m.registerAgent('scaler-bare-metal-wrong001').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RegistrationRefused);
    expect(String(err)).toMatch(/spawned by orchestrator "orch-a" on its own host \(bare-metal backend\)/);
    const row = await store.db
      .selectFrom('scaler_spawning_agents')
      .selectAll()
      .where('agent_id', '=', 'scaler-bare-metal-wrong001')
      .executeTakeFirstOrThrow();
    expect(row.adopted_by).toBeNull();
    expect(row.registered_at).toBeNull();
    await expect(b.m.registerAgent('scaler-event-nosuch001')).rejects.toThrow(/no spawn record/);
  });

  it('a store error during the lookup refuses with ScalerAdoptionLookupError and counts it', async () => {
    const store = await openStore();
    await insertRow(store, 'scaler-event-dbfail01');
    // A real failure of the conditional update, raised by the database.
    await sql`create function kici_test_fail() returns trigger language plpgsql as $$
      begin raise exception 'disk on fire'; end $$`.execute(store.db);
    await sql`create trigger kici_test_fail before update on scaler_spawning_agents
      for each row execute function kici_test_fail()`.execute(store.db);
    const b = instanceManager(store, 'orch-b', { configured: false });
    const err = await b.m.registerAgent('scaler-event-dbfail01').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ScalerAdoptionLookupError);
    expect(err).not.toBeInstanceOf(RegistrationRefused);
    expect(b.m.adoptionLookupFailures).toBe(1);
    // The scrape copies the manager's count.
    const registry = new Registry();
    new EventMetrics(
      registry,
      () => [],
      () => b.m.adoptionLookupFailures,
    );
    expect(await registry.metrics()).toMatch(/^kici_orch_scaler_adoption_lookup_failures_total 1$/m);
    expect(b.m.adoption.has('scaler-event-dbfail01')).toBe(false);
  });
});
