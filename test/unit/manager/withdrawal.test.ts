/**
 * Withdrawal: an unregistered provision whose bound job ended is torn down as job-complete (no
 * failure, no backoff); a registered one, or one whose job still waits, is left alone; a store
 * that cannot say how the jobs stand withdraws nothing.
 */
import { describe, expect, it, vi } from 'vitest';
import { useManagerHarnesses, type ManagerHarness } from '../../helpers/manager-harness.js';
import { bareMetal } from '../../helpers/scaler-config.js';

const hs = useManagerHarnesses();
const config = { version: 1, scalers: [bareMetal('alpha', [['linux']])] };

async function started(h: ManagerHarness, n: number) {
  const { ids } = await h.submit(
    Object.fromEntries([...Array(n).keys()].map((i) => [`j${i}`, { runsOn: ['linux'] }])),
  );
  const agents = ids.map((id) => h.allSpawns().find((s) => s.boundJobId === id)!.agentId);
  for (const a of agents) h.backendOf(a)!.resolveSpawn(a);
  await h.settle();
  return { ids, agents };
}

describe('withdrawal of provisions whose job ended', () => {
  it('only the unregistered provision of an ended job goes, as job-complete, without a failure', async () => {
    const h = await hs.make({ config });
    const { ids, agents } = await started(h, 3);
    expect(await h.d.cancel(ids[0]!)).toBe('cancelled');
    expect(await h.d.cancel(ids[1]!)).toBe('cancelled');
    expect((await h.registerAgent(agents[1]!)).ok).toBe(true); // registered: its own path ends it
    expect(await h.manager.withdrawEnded()).toEqual([agents[0]]);
    await h.settle();
    expect(h.backend('alpha').destroys).toEqual([
      { agentId: agents[0], reason: 'job-complete', known: true },
    ]);
    expect(h.hooks.spawnFailed).toEqual([]);
    expect(h.manager.isProvisioning(ids[2]!)).toBe(true);
    expect((await h.spawnRows()).map((r) => r.agent_id).sort()).toEqual([agents[1], agents[2]].sort());
    // A second pass has nothing left to do.
    expect(await h.manager.withdrawEnded()).toEqual([]);
  });

  it('a store that cannot read the jobs withdraws nothing', async () => {
    const h = await hs.make({ config });
    const { ids } = await started(h, 1);
    expect(await h.d.cancel(ids[0]!)).toBe('cancelled');
    const spy = vi.spyOn(h.store.db, 'selectFrom').mockImplementationOnce(() => {
      throw new Error('connection lost');
    });
    expect(await h.manager.withdrawEnded()).toEqual([]);
    spy.mockRestore();
    expect(h.backend('alpha').destroys).toEqual([]);
    expect(await h.manager.withdrawEnded()).toHaveLength(1);
  });
});
