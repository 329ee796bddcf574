/**
 * The agent lifecycle through the real manager: each event moves an agent along the phase table
 * (never against it), a repeated teardown destroys once, an agent torn down while it queued for a
 * spawn slot never reaches the backend, and an adopted agent's origin decides whether it is warm
 * stock when it dials back in.
 */
import { describe, expect, it } from 'vitest';
import type { AgentPhase } from '../../../src/scaler/agent-lifecycle.js';
import { spawnToken } from '../../helpers/harness-agents.js';
import { useManagerHarnesses } from '../../helpers/manager-harness.js';
import { bareMetal, scalerConfig } from '../../helpers/scaler-config.js';

const hs = useManagerHarnesses();

const config = scalerConfig({
  version: 1,
  scalers: [
    bareMetal('alpha', [{ labels: ['linux'], resources: { requests: { cpus: 1, memory: '256m' } } }], {
      maxAgents: 4,
      maxConcurrentSpawns: 1,
    }),
  ],
});

describe('agent lifecycle in the manager', () => {
  it('walks reserved -> spawning -> starting -> registered -> busy, then leaves', async () => {
    const h = await hs.make({ config });
    const b = h.backend('alpha');
    const phase = (id: string): AgentPhase | undefined =>
      h.manager.entries().find((e) => e.agentId === id)?.phase;
    const { ids } = await h.submit({ a: { runsOn: ['linux'] }, b: { runsOn: ['linux'] } });
    const [first, second] = h.manager.entries().map((e) => e.agentId);
    // One spawn slot: the second agent waits for it with its caps reserved.
    expect([phase(first!), phase(second!)]).toEqual(['spawning', 'reserved']);
    b.resolveSpawn(first!);
    await h.settle();
    expect([phase(first!), phase(second!)]).toEqual(['starting', 'spawning']);
    expect((await h.registerAgent(first!)).ok).toBe(true);
    expect(phase(first!)).toBe('busy');
    const job = h.assigned(first!)[0]!;
    expect(ids).toContain(job);
    await h.finishJob(first!, job);
    await h.disconnect(first!);
    expect(phase(first!)).toBeUndefined();
    expect(h.manager.illegalTransitions).toBe(0);
  });

  it('a fast agent may register before its spawn call returns; the late return changes nothing', async () => {
    const h = await hs.make({ config });
    const b = h.backend('alpha');
    await h.submit({ a: { runsOn: ['linux'] } });
    const [id] = b.pendingIds();
    expect((await h.registerAgent(id!)).ok).toBe(true);
    expect(h.manager.entries()[0]!.phase).toBe('busy');
    b.resolveSpawn(id!);
    await h.settle();
    expect(h.manager.entries()[0]!.phase).toBe('busy');
    expect(b.destroys).toEqual([]);
    expect(h.manager.illegalTransitions).toBe(0);
  });

  it('a repeated teardown destroys once; an agent torn down in the slot queue never spawns', async () => {
    const h = await hs.make({ config, dispatcher: false });
    const b = h.backend('alpha');
    const match = h.manager.routingTable()[0]!;
    for (let i = 0; i < 2; i++) await h.manager.provision(match, h.manager.resourcesFor(match));
    await h.settle();
    const [running, queued] = h.manager.entries();
    expect([running!.phase, queued!.phase]).toEqual(['spawning', 'reserved']);
    await Promise.all([h.manager.teardown(queued!, 'shutdown'), h.manager.teardown(queued!, 'shutdown')]);
    expect(b.destroys.filter((d) => d.agentId === queued!.agentId)).toHaveLength(1);
    // The slot frees: the torn-down agent must not be spawned now.
    b.resolveSpawn(running!.agentId);
    await h.settle();
    expect(b.spawns.map((s) => s.agentId)).toEqual([running!.agentId]);
    expect(h.manager.capBook().count()).toBe(1);
    expect(h.manager.illegalTransitions).toBe(0);
  });

  it('adopted agents reconnect: warm stock only if they had not registered before the restart', async () => {
    const h = await hs.make({ instanceId: 'orch-life', config, dispatcher: false });
    const match = h.manager.routingTable()[0]!;
    const b = h.backend('alpha');
    const fresh = await h.manager.provision(match, h.manager.resourcesFor(match));
    await h.settle();
    b.resolveSpawn(b.pendingIds()[0]!);
    await h.settle();
    const used = await h.manager.provision(match, h.manager.resourcesFor(match));
    await h.settle();
    b.resolveSpawn(b.pendingIds()[0]!);
    await h.settle();
    if (fresh.action !== 'spawning' || used.action !== 'spawning') throw new Error('no spawn');
    // The second warm agent registered before the "crash": it may have taken a job since.
    expect((await h.registerAgent(used.agentId)).ok).toBe(true);
    const tokens = new Map(b.spawns.map((s) => [s.agentId, spawnToken(s)]));

    const h2 = await hs.make({
      instanceId: 'orch-life',
      config,
      dispatcher: false,
      configureBackend: (nb) => {
        nb.adoptResult = true;
      },
    });
    expect(await h2.manager.recover(60_000)).toMatchObject({ adopted: 2 });
    expect(h2.manager.entries().map((e) => e.phase)).toEqual(['reconnecting', 'reconnecting']);
    const r1 = await h2.registerAgent(fresh.agentId, { token: tokens.get(fresh.agentId)! });
    const r2 = await h2.registerAgent(used.agentId, { token: tokens.get(used.agentId)! });
    expect(r1).toMatchObject({ ok: true, result: { warm: true } });
    expect(r2).toMatchObject({ ok: true, result: { warm: false } });
    const phases = new Map(h2.manager.entries().map((e) => [e.agentId, e.phase]));
    expect(phases.get(fresh.agentId)).toBe('registered');
    expect(phases.get(used.agentId)).toBe('busy');
    expect(h2.manager.illegalTransitions).toBe(0);
  });
});
