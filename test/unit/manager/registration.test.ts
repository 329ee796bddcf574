/**
 * Registration of spawned agents, single use (disconnect destroys the compute and releases
 * everything), and the capacity-freed re-drive of waiting jobs.
 */
import { describe, expect, it } from 'vitest';
import { RegistrationRefused } from '../../../src/scaler/manager.js';
import { useManagerHarnesses, type ManagerHarness } from '../../helpers/manager-harness.js';
import { bareMetal } from '../../helpers/scaler-config.js';

const hs = useManagerHarnesses();

/** Submit one job, let its spawn succeed; returns the job and agent ids. */
async function spawned(h: ManagerHarness, runsOn = ['linux']): Promise<{ jobId: string; agentId: string }> {
  const { ids } = await h.submit({ a: { runsOn } });
  const req = h.allSpawns().find((s) => s.boundJobId === ids[0])!;
  h.backendOf(req.agentId)!.resolveSpawn(req.agentId);
  await h.settle();
  return { jobId: ids[0]!, agentId: req.agentId };
}

describe('registration', () => {
  it('refuses an unknown scaler- id and returns null for a static id', async () => {
    const h = await hs.make({ config: { version: 1, scalers: [bareMetal('alpha', [['linux']])] } });
    expect(() => h.manager.onAgentRegistered('scaler-bare-metal-deadbeef')).toThrow(RegistrationRefused);
    expect(h.manager.onAgentRegistered('build-box-1')).toBeNull();
    expect(h.manager.isManaged('build-box-1')).toBe(false);
  });

  it('returns the bound job once, the gate and the scaler; marks the backend and the spawn row', async () => {
    const h = await hs.make({
      config: {
        version: 1,
        scalers: [bareMetal('alpha', [['linux', 'secure']], { mandatoryLabels: ['secure'] })],
      },
    });
    const { jobId, agentId } = await spawned(h, ['linux', 'secure']);
    const r = h.manager.onAgentRegistered(agentId);
    expect(r).toMatchObject({ scalerName: 'alpha', boundJobId: jobId, gate: ['secure'], warm: false });
    expect(h.backend('alpha').registeredMarks).toEqual([agentId]);
    expect(h.manager.onAgentRegistered(agentId)).toMatchObject({
      scalerName: 'alpha',
      boundJobId: undefined,
    });
    await h.settle();
    const rows = await h.spawnRows();
    expect(rows).toEqual([
      expect.objectContaining({ agent_id: agentId, registered_at: new Date(h.clock.now()) }),
    ]);
    expect(h.manager.isProvisioning(jobId)).toBe(false);
  });

  it('the registered agent is dispatched its bound job at once', async () => {
    const h = await hs.make({ config: { version: 1, scalers: [bareMetal('alpha', [['linux']])] } });
    const { jobId, agentId } = await spawned(h);
    const r = await h.registerAgent(agentId);
    expect(r.ok).toBe(true);
    expect(h.assigned(agentId)).toEqual([jobId]);
    expect(await h.jobState(jobId)).toBe('dispatched');
  });

  it('a bound agent whose job is no longer waiting serves another waiting job instead', async () => {
    const h = await hs.make({
      config: { version: 1, scalers: [bareMetal('alpha', [['linux']], { maxAgents: 1 })] },
    });
    const { jobId, agentId } = await spawned(h);
    expect(await h.d.cancel(jobId)).toBe('cancelled');
    const { ids } = await h.submit({ b: { runsOn: ['linux'] } });
    // maxAgents 1: the second job waits for the agent already on its way.
    expect(h.backend('alpha').spawns).toHaveLength(1);
    expect((await h.registerAgent(agentId)).ok).toBe(true);
    expect(h.assigned(agentId)).toEqual(ids);
  });
});

describe('single use', () => {
  it('disconnect after the job: compute destroyed, reservation released, spawn row and token gone', async () => {
    const h = await hs.make({ config: { version: 1, scalers: [bareMetal('alpha', [['linux']])] } });
    const { jobId, agentId } = await spawned(h);
    await h.registerAgent(agentId);
    await h.finishJob(agentId, jobId);
    expect(await h.jobState(jobId)).toBe('succeeded');
    // Finished but still connected: it holds its slot until it leaves.
    expect(h.manager.capBook().count()).toBe(1);
    expect(h.backend('alpha').destroys).toEqual([]);
    await h.disconnect(agentId);
    expect(h.backend('alpha').destroys).toEqual([{ agentId, reason: 'disconnected', known: true }]);
    expect(h.manager.capBook().count()).toBe(0);
    expect(h.manager.entries()).toEqual([]);
    expect(h.backend('alpha').getActiveCount()).toBe(0);
    expect(await h.spawnRows()).toEqual([]);
    expect(await h.reservationRows()).toEqual([]);
    const tok = await h.store.db
      .selectFrom('agent_tokens')
      .select('revoked_at')
      .where('agent_id', '=', agentId)
      .executeTakeFirstOrThrow();
    expect(tok.revoked_at).not.toBeNull();
    // The same agent cannot come back.
    expect(await h.registerAgent(agentId)).toMatchObject({ ok: false });
  });

  it('an ephemeral agent takes exactly one job', async () => {
    const h = await hs.make({
      config: { version: 1, scalers: [bareMetal('alpha', [['linux']], { maxAgents: 1 })] },
    });
    const { jobId, agentId } = await spawned(h);
    await h.registerAgent(agentId);
    const { ids } = await h.submit({ b: { runsOn: ['linux'] } });
    await h.finishJob(agentId, jobId);
    await h.pump();
    expect(h.assigned(agentId)).toEqual([jobId]);
    expect(await h.jobState(ids[0]!)).toBe('queued');
  });

  it('disconnect before the job started: the job is requeued and provisioned again', async () => {
    const h = await hs.make({ config: { version: 1, scalers: [bareMetal('alpha', [['linux']])] } });
    const { jobId, agentId } = await spawned(h);
    await h.registerAgent(agentId);
    await h.disconnect(agentId);
    expect(await h.jobState(jobId)).toBe('queued');
    const again = h.backend('alpha').spawns.filter((s) => s.boundJobId === jobId);
    expect(again.map((s) => s.agentId)).toEqual([agentId, expect.not.stringMatching(agentId)]);
  });

  it('disconnect mid-job: the job fails and is not retried', async () => {
    const h = await hs.make({ config: { version: 1, scalers: [bareMetal('alpha', [['linux']])] } });
    const { jobId, agentId } = await spawned(h);
    await h.registerAgent(agentId);
    await h.startJob(agentId, jobId);
    await h.disconnect(agentId);
    expect(await h.jobState(jobId)).toBe('failed');
    expect(h.backend('alpha').spawns).toHaveLength(1);
    expect(h.manager.capBook().count()).toBe(0);
  });
});

describe('re-drive when capacity frees', () => {
  it('an agent leaving lets a waiting job spawn at once, without the periodic sweep', async () => {
    const h = await hs.make({
      config: { version: 1, scalers: [bareMetal('alpha', [['linux']], { maxAgents: 1 })] },
    });
    const { ids } = await h.submit({ a: { runsOn: ['linux'] }, b: { runsOn: ['linux'] } });
    const b = h.backend('alpha');
    expect(b.spawns).toHaveLength(1);
    const first = b.spawns[0]!;
    b.resolveSpawn(first.agentId);
    await h.settle();
    await h.registerAgent(first.agentId);
    await h.finishJob(first.agentId, first.boundJobId!);
    expect(b.spawns).toHaveLength(1);
    await h.disconnect(first.agentId);
    expect(b.spawns).toHaveLength(2);
    expect(b.spawns[1]!.boundJobId).toBe(ids.find((id) => id !== first.boundJobId));
  });

  it('a failed spawn re-drives waiting jobs within the 25 ms debounce', async () => {
    const h = await hs.make({
      config: {
        version: 1,
        scalers: [
          bareMetal(
            'alpha',
            [
              ['linux', 'a'],
              ['linux', 'b'],
            ],
            { maxAgents: 1 },
          ),
        ],
      },
    });
    const { byName } = await h.submit({ a: { runsOn: ['a'] } });
    await h.submit({ b: { runsOn: ['b'] } });
    const be = h.backend('alpha');
    expect(be.spawns.map((s) => s.boundJobId)).toEqual([byName.a]);
    be.failSpawn(be.spawns[0]!.agentId, new Error('ECONNRESET'));
    await h.settle();
    // Nothing pumps on its own before the debounce ends.
    await h.advance(24);
    expect(be.spawns).toHaveLength(1);
    await h.advance(1);
    expect(h.hooks.capacityFreed).toBe(1);
    expect(be.spawns).toHaveLength(2);
    // A transient failure holds nothing back: the oldest waiting job is retried first.
    expect(be.spawns[1]!.boundJobId).toBe(byName.a);
  });

  it('a burst of releases calls the hook once', async () => {
    const h = await hs.make({
      dispatcher: false,
      config: { version: 1, scalers: [bareMetal('alpha', [['linux']])] },
    });
    for (let i = 0; i < 3; i++) await h.manager.requestScale({ id: `j${i}`, runId: 'r', runsOn: ['linux'] });
    await h.settle();
    for (const id of h.backend('alpha').pendingIds()) h.backend('alpha').failSpawn(id, new Error('x'));
    await h.settle();
    await h.advance(1_000);
    expect(h.hooks.capacityFreed).toBe(1);
  });
});
