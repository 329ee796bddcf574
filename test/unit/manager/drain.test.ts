/**
 * Drain at the manager: a draining orchestrator spawns nothing, and a stop that leaves running
 * agents alive keeps exactly what the next start needs to re-adopt them (spawn record, token,
 * compute) while everything else is torn down.
 */
import { describe, expect, it } from 'vitest';
import { spawnToken } from '../../helpers/harness-agents.js';
import { useManagerHarnesses } from '../../helpers/manager-harness.js';
import { bareMetal, scalerConfig } from '../../helpers/scaler-config.js';

const hs = useManagerHarnesses();
const config = scalerConfig({ version: 1, scalers: [bareMetal('alpha', [['linux']], { maxAgents: 5 })] });

describe('drain and a stop that leaves agents', () => {
  it('while draining, no job is assigned and no agent (bound or warm) is spawned', async () => {
    const h = await hs.make({ config });
    await h.dispatcher!.drain();
    h.manager.drain();
    const { ids } = await h.submit({ a: { runsOn: ['linux'] }, b: { runsOn: ['linux'] } });
    await h.sweep();
    expect(h.backend('alpha').spawns).toEqual([]);
    for (const id of ids) expect(await h.jobState(id)).toBe('queued');
    const r = await h.manager.requestScale({ id: ids[0]!, runId: 'r', runsOn: ['linux'] });
    expect(r).toMatchObject({ action: 'skipped', reason: 'orchestrator is draining' });
    const match = h.manager.routingTable()[0]!;
    expect(await h.manager.provision(match, h.manager.resourcesFor(match))).toMatchObject({
      action: 'skipped',
    });
  });

  it('an agent registering during the drain does not get its bound job', async () => {
    const h = await hs.make({ config });
    const { ids } = await h.submit({ a: { runsOn: ['linux'] } });
    const b = h.backend('alpha');
    const agentId = b.spawns[0]!.agentId;
    await h.dispatcher!.drain();
    b.resolveSpawn(agentId);
    await h.settle();
    await h.registerAgent(agentId);
    expect(h.assigned(agentId)).toEqual([]);
    expect(await h.jobState(ids[0]!)).toBe('queued');
  });

  it('shutdownAll with kept agents destroys only the others and keeps the kept ones adoptable', async () => {
    const h = await hs.make({ config });
    const { ids } = await h.submit({ a: { runsOn: ['linux'] }, b: { runsOn: ['linux'] } });
    const b = h.backend('alpha');
    const [running, idle] = b.spawns.map((s) => s.agentId);
    for (const id of [running!, idle!]) b.resolveSpawn(id);
    await h.settle();
    await h.registerAgent(running!);
    await h.startJob(running!, ids[0]!);
    const tokenOfRunning = spawnToken(b.requestFor(running!)!);

    await h.manager.shutdownAll(1_000, new Set([running!]), 'drain');
    await h.settle();

    expect(b.destroyedIds()).toEqual([idle]);
    // The backend learns why: the end of a graceful stop, not a plain shutdown.
    expect(b.destroys.map((d) => d.reason)).toEqual(['drain']);
    expect(b.shutdownCalls).toBe(0);
    expect((await h.spawnRows()).map((r) => r.agent_id)).toEqual([running]);
    expect((await h.store.tokens.check(tokenOfRunning, new Date(h.clock.now()))).ok).toBe(true);
    expect(await h.jobState(ids[0]!)).toBe('running');
  });

  it('a stop waits for a teardown already under way: its spawn record and token are gone when it returns', async () => {
    const h = await hs.make({ config });
    const { ids } = await h.submit({ a: { runsOn: ['linux'] } });
    const b = h.backend('alpha');
    const agentId = b.spawns[0]!.agentId;
    b.resolveSpawn(agentId);
    await h.settle();
    await h.registerAgent(agentId);
    const token = spawnToken(b.requestFor(agentId)!);
    b.holdDestroys = true;
    // Its job done, the agent leaves: gone from the books at once, its compute still being destroyed.
    await h.finishJob(agentId, ids[0]!);
    const leaving = h.manager.onAgentDisconnected(agentId, 'job-complete');
    await h.settle();
    expect(h.manager.entries()).toEqual([]);
    expect(h.manager.teardownsInFlight).toBe(1);
    let stopped = false;
    const stop = h.manager.shutdownAll(60_000).then(() => (stopped = true));
    await h.settle();
    expect(stopped).toBe(false);
    b.releaseDestroys();
    await stop;
    await leaving;
    expect(h.manager.teardownsInFlight).toBe(0);
    expect(await h.spawnRows()).toEqual([]);
    expect((await h.store.tokens.check(token, new Date(h.clock.now()))).ok).toBe(false);
  });
});
