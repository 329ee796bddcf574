/**
 * Peer adoption is a capability, not the event backend's type: a bare-metal-typed backend that
 * declares `peerAdoptable` gets the event backend's handling (a claim instead of a token at spawn,
 * and the per-instance withdrawal of a stale provision the lease holder reaped), and one that does
 * not, with the same cluster lifetime, gets none of it.
 */
import { describe, expect, it } from 'vitest';
import { withdrawReapedByPeer } from '../../../src/scaler/reaped-by-peer.js';
import { silentLogger } from '../../../src/util/logger.js';
import { useManagerHarnesses, type ManagerHarness } from '../../helpers/manager-harness.js';
import { bareMetal } from '../../helpers/scaler-config.js';

const hs = useManagerHarnesses();
const SPAWN_TIMEOUT_MS = 10_000;

async function harness(peerAdoptable: boolean, forgotten: string[]): Promise<ManagerHarness> {
  return hs.make({
    config: { version: 1, scalers: [bareMetal('pa', [['linux']])] },
    spawnTimeoutMs: SPAWN_TIMEOUT_MS,
    configureBackend: (b) => {
      // Only the capability differs between the two harnesses; the lifetime is the same.
      b.capabilities.lifetime = 'cluster';
      b.capabilities.peerAdoptable = peerAdoptable;
      Object.assign(b, { forget: (id: string) => void forgotten.push(id) });
    },
  });
}

/**
 * A provision waiting for its agent, whose spawn row the lease holder has since removed; with what
 * the row recorded of the capability before it went.
 */
async function reapedWhileWaiting(h: ManagerHarness): Promise<{ agentId: string; recorded: boolean }> {
  await h.submit({ j: { runsOn: ['linux'] } });
  const req = h.allSpawns().at(-1)!;
  h.backendOf(req.agentId)!.resolveSpawn(req.agentId);
  await h.settle();
  expect(h.manager.state.agents.get(req.agentId)?.phase).toBe('starting');
  const row = await h.store.db
    .selectFrom('scaler_spawning_agents')
    .select('peer_adoptable')
    .where('agent_id', '=', req.agentId)
    .executeTakeFirstOrThrow();
  await h.store.db.deleteFrom('scaler_spawning_agents').where('agent_id', '=', req.agentId).execute();
  await h.advance(SPAWN_TIMEOUT_MS + 1_000);
  await withdrawReapedByPeer({
    db: h.store.db,
    manager: h.manager,
    instanceId: 'orch-test',
    clock: h.clock,
    spawnTimeoutMs: SPAWN_TIMEOUT_MS,
    log: silentLogger(),
  });
  await h.settle();
  return { agentId: req.agentId, recorded: row.peer_adoptable };
}

describe('peerAdoptable decides, whatever the backend type', () => {
  it('a bare-metal-typed backend declaring it: claim at spawn; a reaped provision is forgotten and failed', async () => {
    const forgotten: string[] = [];
    const h = await harness(true, forgotten);
    const { agentId, recorded } = await reapedWhileWaiting(h);
    // The spawn row carries the capability, so the store's cap, adoption and reaper see it too.
    expect(recorded).toBe(true);
    expect(h.backend('pa').requestFor(agentId)?.auth.kind).toBe('claim');
    expect(forgotten).toEqual([agentId]);
    expect(h.manager.state.agents.has(agentId)).toBe(false);
    expect(h.manager.failures.records().map((r) => r.kind)).toEqual(['spawn-timeout']);
  });

  it('control: the same backend without it mints a token and keeps its provision', async () => {
    const forgotten: string[] = [];
    const h = await harness(false, forgotten);
    const { agentId, recorded } = await reapedWhileWaiting(h);
    expect(recorded).toBe(false);
    expect(h.backend('pa').requestFor(agentId)?.auth.kind).toBe('token');
    expect(forgotten).toEqual([]);
    expect(h.manager.state.agents.get(agentId)?.phase).toBe('starting');
    expect(h.manager.failures.records()).toEqual([]);
  });
});
