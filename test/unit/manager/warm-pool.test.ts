/**
 * Warm pools through the manager and a real dispatcher: warm agents are spawned unbound, count
 * against caps, take a job without a spawn for it, are replenished when consumed, are reaped when
 * idle past the timeout beyond the pool size, and only take jobs of their own shape.
 */
import { describe, expect, it } from 'vitest';
import { useManagerHarnesses, type ManagerHarness } from '../../helpers/manager-harness.js';
import { bareMetal, scalerConfig } from '../../helpers/scaler-config.js';

const hs = useManagerHarnesses();
const MiB = 1024 * 1024;

function warmConfig(opts: { size?: number; maxAgents?: number; idle?: number } = {}) {
  return scalerConfig({
    version: 1,
    scalers: [
      bareMetal('warm', [{ labels: ['linux'], resources: { requests: { cpus: 1, memory: '512m' } } }], {
        maxAgents: opts.maxAgents ?? 5,
        warmPool: { enabled: true, size: opts.size ?? 2, idleTimeoutSeconds: opts.idle ?? 60 },
      }),
    ],
  });
}

/** Start the pools, let both warm spawns succeed and the agents register. */
async function warmUp(h: ManagerHarness): Promise<string[]> {
  h.manager.warm.start();
  await h.settle();
  const b = h.backend('warm');
  const ids = b.pendingIds();
  for (const id of ids) b.resolveSpawn(id);
  await h.settle();
  for (const id of ids) {
    const r = await h.registerAgent(id);
    if (!r.ok) throw new Error(r.reason);
    expect(r.result).toMatchObject({ warm: true, boundJobId: undefined });
  }
  return ids;
}

describe('warm pools', () => {
  it('spawns `size` unbound agents with the label set shape, holding reservations', async () => {
    const h = await hs.make({ config: warmConfig() });
    h.manager.warm.start();
    await h.settle();
    const b = h.backend('warm');
    expect(b.spawns).toHaveLength(2);
    for (const s of b.spawns) {
      expect(s.boundJobId).toBeUndefined();
      expect(s.runId).toBeUndefined();
      expect(s.labelSet).toEqual(['linux']);
      expect(s.limits).toEqual({ cpus: 1, memBytes: 512 * MiB });
    }
    expect(h.manager.capBook().count('warm')).toBe(2);
    expect(h.manager.capBook().usage('warm')).toEqual({ cpus: 2, memBytes: 1024 * MiB });
    // In flight counts as pending: another pass adds nothing.
    await h.manager.warm.tick();
    await h.settle();
    expect(b.spawns).toHaveLength(2);
  });

  it('warm agents count against caps', async () => {
    const h = await hs.make({ config: warmConfig({ maxAgents: 3 }) });
    await warmUp(h);
    // Two jobs that do not fit the warm shape need their own agents: only one slot is left.
    await h.submit({
      a: { runsOn: ['linux'], resources: { limits: { cpus: 4 } } },
      b: { runsOn: ['linux'], resources: { limits: { cpus: 4 } } },
    });
    const bound = h.backend('warm').spawns.filter((s) => s.boundJobId !== undefined);
    expect(bound).toHaveLength(1);
    expect(h.manager.capBook().count('warm')).toBe(3);
    const waiting = h.d.queue.all().filter((j) => !h.manager.isProvisioning(j.id));
    expect(waiting).toHaveLength(1);
    expect(waiting[0]!.waiting).toContain('maxAgents');
  });

  it('a job takes an idle warm agent without a spawn for it; consuming it triggers a replenish', async () => {
    const h = await hs.make({ config: warmConfig() });
    const warm = await warmUp(h);
    const b = h.backend('warm');
    const { ids } = await h.submit({ a: { runsOn: ['linux'] } });
    const takers = warm.filter((id) => h.assigned(id).includes(ids[0]!));
    expect(takers).toHaveLength(1);
    expect(b.spawns.filter((s) => s.boundJobId === ids[0])).toEqual([]);
    expect(b.spawns).toHaveLength(2);
    // The replenish is scheduled (0 ms), not run inline.
    await h.advance(0);
    expect(b.spawns).toHaveLength(3);
    expect(b.spawns[2]!.boundJobId).toBeUndefined();
    // The consumed agent is no longer pool stock: after it finishes and leaves, the pool is whole again.
    await h.finishJob(takers[0]!, ids[0]!);
    await h.disconnect(takers[0]!);
    b.resolveSpawn(b.spawns[2]!.agentId);
    await h.settle();
    expect((await h.registerAgent(b.spawns[2]!.agentId)).ok).toBe(true);
    await h.manager.warm.tick();
    await h.settle();
    expect(b.spawns).toHaveLength(3);
    expect(h.manager.warm.ready(h.manager.warm.specs()[0]!)).toHaveLength(2);
  });

  it('reaps idle agents beyond the size after idleTimeoutSeconds, oldest first, not before', async () => {
    const h = await hs.make({ config: warmConfig({ size: 2, idle: 60 }) });
    const b = h.backend('warm');
    const first = await warmUp(h);
    // A third idle warm agent (e.g. spawned before a job it was meant for went elsewhere).
    await h.advance(10_000);
    const match = h.manager.routingTable()[0]!;
    const extra = await h.manager.provision(match, h.manager.resourcesFor(match));
    if (extra.action !== 'spawning') throw new Error(extra.action);
    await h.settle();
    b.resolveSpawn(extra.agentId);
    await h.settle();
    expect((await h.registerAgent(extra.agentId)).ok).toBe(true);
    expect(h.manager.warm.ready(h.manager.warm.specs()[0]!)).toHaveLength(3);
    // 59 s after the oldest registered: nothing is reaped.
    await h.advance(49_000);
    await h.manager.warm.tick();
    await h.settle();
    expect(b.destroys).toEqual([]);
    // Past the timeout: exactly the surplus (one), the oldest.
    await h.advance(1_000);
    await h.manager.warm.tick();
    await h.settle();
    expect(b.destroys.map((d) => d.agentId)).toEqual([first[0]]);
    expect(h.manager.capBook().count('warm')).toBe(2);
    expect(
      h.manager
        .entries()
        .map((e) => e.agentId)
        .sort(),
    ).toEqual([first[1], extra.agentId].sort());
    // The reaped agent's connection went away with its compute; the pool is at size: no new spawn.
    expect(h.connectedIds().sort()).toEqual([first[1], extra.agentId].sort());
    expect(b.spawns).toHaveLength(3);
    // At size, age alone never reaps.
    await h.advance(3_600_000);
    await h.manager.warm.tick();
    await h.settle();
    expect(b.destroys).toHaveLength(1);
  });

  it('shrinking the size by reload reaps the surplus at once', async () => {
    const h = await hs.make({ config: warmConfig({ size: 2, idle: 600 }) });
    const warm = await warmUp(h);
    const out = await h.manager.reload(warmConfig({ size: 1, idle: 600 }), h.factory);
    expect(out.result).toBe('applied');
    await h.settle();
    expect(h.backend('warm').destroys.map((d) => d.agentId)).toEqual([warm[0]]);
    expect(h.manager.capBook().count('warm')).toBe(1);
    // Disabling the pool drains the rest at once.
    const off = scalerConfig({
      version: 1,
      scalers: [
        bareMetal('warm', [{ labels: ['linux'], resources: { requests: { cpus: 1, memory: '512m' } } }], {
          maxAgents: 5,
        }),
      ],
    });
    expect((await h.manager.reload(off, h.factory)).result).toBe('applied');
    await h.settle();
    expect(h.backend('warm').destroys.map((d) => d.agentId)).toEqual(warm);
    expect(h.manager.capBook().count()).toBe(0);
  });

  it('agentFits refuses a job whose declared resources differ from the warm shape', async () => {
    const h = await hs.make({ config: warmConfig() });
    const [w] = await warmUp(h);
    const m = h.manager;
    const j = (resources?: Record<string, unknown>) => ({
      id: 'x',
      runId: 'r',
      runsOn: ['linux'],
      ...(resources ? { resources } : {}),
    });
    expect(m.agentFits(w!, j())).toBe(true);
    expect(
      m.agentFits(w!, j({ requests: { cpus: 1, memory: '512m' }, limits: { cpus: 1, memory: '512m' } })),
    ).toBe(true);
    expect(m.agentFits(w!, j({ limits: { cpus: 1 } }))).toBe(true);
    expect(m.agentFits(w!, j({ limits: { cpus: 2 } }))).toBe(false);
    expect(m.agentFits(w!, j({ requests: { memory: '1g' } }))).toBe(false);
    expect(m.agentFits(w!, j({ requests: { cpus: 1 }, limits: { cpus: 1, memory: '256m' } }))).toBe(false);
  });

  it('a job of another shape does not take the warm agent: it gets its own spawn', async () => {
    const h = await hs.make({ config: warmConfig() });
    const warm = await warmUp(h);
    const b = h.backend('warm');
    const { ids } = await h.submit({
      big: { runsOn: ['linux'], resources: { limits: { cpus: 2, memory: '512m' } } },
      fit: { runsOn: ['linux'], resources: { limits: { cpus: 1, memory: '512m' } } },
    });
    const [big, fit] = ids;
    for (const id of warm) expect(h.assigned(id)).not.toContain(big);
    expect(warm.some((id) => h.assigned(id).includes(fit!))).toBe(true);
    const own = b.spawns.filter((s) => s.boundJobId === big);
    expect(own).toHaveLength(1);
    expect(own[0]!.limits).toEqual({ cpus: 2, memBytes: 512 * MiB });
  });

  it('a job of another shape queued behind a fitting one is still not given a warm agent (a warm agent must fit the shape)', async () => {
    const h = await hs.make({ config: warmConfig() });
    const warm = await warmUp(h);
    // Same runsOn, so the two jobs share one queue group; the first fits the warm shape, the second does not.
    const { byName } = await h.submit({
      fit: { runsOn: ['linux'] },
      big: { runsOn: ['linux'], resources: { limits: { cpus: 4, memory: '8g' } } },
    });
    const onWarm = warm.flatMap((id) => h.assigned(id));
    expect(onWarm).toContain(byName.fit);
    expect(onWarm).not.toContain(byName.big);
    expect(h.backend('warm').spawns.filter((s) => s.boundJobId === byName.big)).toHaveLength(1);
  });
});
