/**
 * The spawner's side of cross-instance adoption: its restart recovery leaves rows a peer adopted
 * alone, and its stale prune forgets a provision a peer adopted (no failure, no backoff, no
 * scale-down) while one nobody adopted is still a failed provision.
 */
import { describe, expect, it } from 'vitest';
import { EventProvisionReaper } from '../../../src/scaler/event-reaper.js';
import type { ScalerManager } from '../../../src/scaler/manager.js';
import { AdoptionRepo } from '../../../src/store/adoption-repo.js';
import type { Store } from '../../../src/store/index.js';
import { ManualClock } from '../../../src/util/clock.js';
import { insertRow, instanceManager, storePerTest } from '../../helpers/adoption-store.js';
import { silent } from '../../helpers/event-backend.js';

const openStore = storePerTest();

describe('restart recovery', () => {
  it('a restarted spawner leaves rows a peer adopted alone; its own and unadopted rows are still its own', async () => {
    const store = await openStore();
    await insertRow(store, 'scaler-event-rec00001');
    await insertRow(store, 'scaler-event-rec00002');
    await insertRow(store, 'scaler-event-rec00003');
    const repo = new AdoptionRepo(store.db);
    await repo.adoptSpawningAgent('scaler-event-rec00002', 'orch-b', new Date());
    await repo.adoptSpawningAgent('scaler-event-rec00003', 'orch-a', new Date());
    const owned = (await store.spawns.listOwned('orch-a')).map((r) => r.agent_id).sort();
    expect(owned).toEqual(['scaler-event-rec00001', 'scaler-event-rec00003']);
    // Recovery on A neither adopts B's agent nor deletes B's row (B answers for its teardown).
    const a = instanceManager(store, 'orch-a', { configured: true });
    await a.m.recover(60_000);
    expect(a.m.state.agents.has('scaler-event-rec00002')).toBe(false);
    const left = await store.db
      .selectFrom('scaler_spawning_agents')
      .select('agent_id')
      .where('agent_id', '=', 'scaler-event-rec00002')
      .execute();
    expect(left).toHaveLength(1);
    expect(a.emitter.downs('scaler-event-rec00002')).toHaveLength(0);
  });
});

describe("the spawner's stale prune", () => {
  async function spawnOnA(store: Store, clock: ManualClock) {
    const a = instanceManager(store, 'orch-a', { configured: true, clock });
    await store.db.insertInto('runs').values({ id: 'r-1', name: 'r' }).execute();
    const res = await a.m.provision(a.m.route({ runsOn: ['cloud', 'linux'] })!, {
      requests: { cpus: 0, memBytes: 0 },
      limits: { cpus: 0, memBytes: 0 },
    });
    expect(res.action).toBe('spawning');
    const agentId = (res as { agentId: string }).agentId;
    await eventuallyPhase(a.m, agentId, 'starting');
    const reaper = new EventProvisionReaper({
      db: store.db,
      engine: 'pglite',
      manager: a.m,
      instanceId: 'orch-a',
      clock,
      logger: silent,
      spawnTimeoutMs: 10_000,
      intervalMs: 60_000,
      windows: { flapGraceMs: 0 },
    });
    return { a, agentId, reaper };
  }

  for (const after of ['while the adopter holds it', 'after the adopter tore it down'] as const) {
    it(`forgets a provision a peer adopted, ${after}: no failure, no backoff, no scale-down`, async () => {
      const store = await openStore();
      const clock = new ManualClock(1_000_000);
      const { a, agentId, reaper } = await spawnOnA(store, clock);
      const b = instanceManager(store, 'orch-b', { configured: false });
      await b.m.registerAgent(agentId);
      if (after === 'after the adopter tore it down') await b.m.onAgentDisconnected(agentId);
      clock.advance(11_000);
      await reaper.tick();
      expect(a.m.state.agents.has(agentId)).toBe(false);
      expect(a.m.failures.records()).toHaveLength(0);
      expect(a.m.backoff.snapshot()).toEqual([]);
      expect(a.emitter.downs(agentId)).toHaveLength(0);
      expect(b.emitter.downs(agentId)).toHaveLength(after === 'after the adopter tore it down' ? 1 : 0);
      expect(reaper.reaped).toBe(0);
    });
  }

  it('control: a provision nobody adopted is still a failed provision', async () => {
    const store = await openStore();
    const clock = new ManualClock(1_000_000);
    const { a, agentId, reaper } = await spawnOnA(store, clock);
    clock.advance(11_000);
    // The first pass starts its absence clock; the next one, past the (zero) flap grace, reaps it.
    await reaper.tick();
    expect(a.emitter.downs(agentId)).toHaveLength(0);
    await reaper.tick();
    expect(a.m.state.agents.has(agentId)).toBe(false);
    expect(a.m.failures.records()).toHaveLength(1);
    expect(a.emitter.downs(agentId)).toHaveLength(1);
  });
});

async function eventuallyPhase(m: ScalerManager, agentId: string, phase: string): Promise<void> {
  for (let i = 0; i < 200; i++) {
    if (m.state.agents.get(agentId)?.phase === phase) return;
    await new Promise((r) => setTimeout(r, 5));
  }
  throw new Error(`${agentId} never reached ${phase}`);
}
