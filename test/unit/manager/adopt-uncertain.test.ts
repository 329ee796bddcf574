/**
 * Adoption after a restart tells "gone" from "cannot tell". A backend that cannot tell (its engine
 * does not answer) keeps the agent's record, token and capacity; it is asked again until it
 * answers: gone → reclaimed, alive → adopted with its own reconnect window. Meanwhile the agent may
 * register.
 */
import { describe, expect, it } from 'vitest';
import { ADOPT_RECHECK_MS } from '../../../src/scaler/recovery.js';
import { spawnToken } from '../../helpers/harness-agents.js';
import { useManagerHarnesses, type ManagerHarness } from '../../helpers/manager-harness.js';
import { bareMetal, scalerConfig } from '../../helpers/scaler-config.js';

const hs = useManagerHarnesses();
const config = scalerConfig({ version: 1, scalers: [bareMetal('alpha', [['linux']], { maxAgents: 3 })] });

/** One bound, spawned, unregistered agent; then the orchestrator "crashes". */
async function crashed(): Promise<{ h: ManagerHarness; agentId: string; token: string }> {
  const h = await hs.make({ instanceId: 'orch-1', config });
  const { ids } = await h.submit({ a: { runsOn: ['linux'] } });
  const req = h.allSpawns().find((s) => s.boundJobId === ids[0])!;
  h.backend('alpha').resolveSpawn(req.agentId);
  await h.settle();
  return { h, agentId: req.agentId, token: spawnToken(req) };
}

/** A restarted manager on the same store whose backend answers `answer()` to adopt. */
async function restarted(h: ManagerHarness, answer: { now: 'throw' | boolean }) {
  return hs.make({
    instanceId: 'orch-1',
    config,
    store: h.store,
    dispatcher: false,
    configureBackend: (b) => {
      b.adoptResult = () => {
        if (answer.now === 'throw') throw new Error('engine unreachable');
        return answer.now;
      };
    },
  });
}

const tokenOk = async (h: ManagerHarness, token: string) =>
  (await h.store.tokens.check(token, new Date(h.clock.now()))).ok;

describe('adoption that cannot tell', () => {
  it('keeps the record and token while the backend cannot tell, then reclaims once it says gone', async () => {
    const { h, agentId, token } = await crashed();
    const answer: { now: 'throw' | boolean } = { now: 'throw' };
    const h2 = await restarted(h, answer);
    expect(await h2.manager.recover(60_000)).toEqual({ adopted: 0, reclaimed: 0, dropped: 0, uncertain: 1 });
    expect((await h2.spawnRows()).map((r) => r.agent_id)).toEqual([agentId]);
    expect(await tokenOk(h2, token)).toBe(true);
    expect(h2.manager.capBook().count()).toBe(1);
    // Past the reconnect window and several re-asks, still unable to tell: still kept.
    await h2.advance(60_000 + 3 * ADOPT_RECHECK_MS);
    expect(h2.backend('alpha').destroys).toEqual([]);
    expect((await h2.spawnRows()).map((r) => r.agent_id)).toEqual([agentId]);
    expect(await tokenOk(h2, token)).toBe(true);
    answer.now = false;
    await h2.advance(ADOPT_RECHECK_MS);
    expect(await h2.spawnRows()).toEqual([]);
    expect(await tokenOk(h2, token)).toBe(false);
    expect(h2.manager.capBook().count()).toBe(0);
  });

  it('once the backend says alive the agent is adopted, and reclaimed only if it never reconnects', async () => {
    const { h, agentId } = await crashed();
    const answer: { now: 'throw' | boolean } = { now: 'throw' };
    const h2 = await restarted(h, answer);
    await h2.manager.recover(60_000);
    answer.now = true;
    await h2.advance(ADOPT_RECHECK_MS);
    expect(h2.backend('alpha').agents.has(agentId)).toBe(true);
    await h2.advance(60_000 - 1);
    expect(h2.backend('alpha').destroys).toEqual([]);
    await h2.advance(1);
    expect(h2.backend('alpha').destroys.map((d) => d.agentId)).toEqual([agentId]);
  });

  it('an agent that registers while the backend cannot tell is accepted', async () => {
    const { h, agentId, token } = await crashed();
    const h2 = await restarted(h, { now: 'throw' });
    await h2.manager.recover(60_000);
    const r = await h2.registerAgent(agentId, { token });
    expect(r).toMatchObject({ ok: true, result: { scalerName: 'alpha' } });
  });
});
