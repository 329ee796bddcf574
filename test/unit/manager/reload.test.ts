/**
 * Live reload through `ScalerManager.reload`: the plan, all-or-nothing validation (type change,
 * backend refusal, factory failure), retirement of removed scalers, and settings that apply to new
 * spawns only.
 */
import { describe, expect, it } from 'vitest';
import type { ScaleJob } from '../../../src/scaler/types.js';
import { useManagerHarnesses, type ManagerHarness } from '../../helpers/manager-harness.js';
import { bareMetal, scalerConfig } from '../../helpers/scaler-config.js';

const hs = useManagerHarnesses();
let seq = 0;
const job = (runsOn: string[]): ScaleJob => ({ id: `job-${++seq}`, runId: 'run-1', runsOn });

const base = () =>
  scalerConfig({
    version: 1,
    globalMaxAgents: 10,
    scalers: [
      bareMetal('alpha', [['a']], { maxAgents: 1 }),
      bareMetal('beta', [['b']], { maxAgents: 1 }),
      bareMetal('gamma', [['c']], { maxAgents: 1 }),
    ],
  });

async function spawnFor(h: ManagerHarness, runsOn: string[]): Promise<string> {
  const r = await h.manager.requestScale(job(runsOn));
  await h.settle();
  if (r.action !== 'spawning') throw new Error(`expected spawning, got ${JSON.stringify(r)}`);
  return r.agentId;
}

describe('reload plan', () => {
  it('reports added / updated / unchanged / retired and global changes, building only the added', async () => {
    const h = await hs.make({ dispatcher: false, config: base() });
    const next = scalerConfig({
      version: 1,
      globalMaxAgents: 20,
      scalers: [
        bareMetal('alpha', [['a']], { maxAgents: 1 }),
        bareMetal('beta', [['b']], { maxAgents: 3 }),
        bareMetal('delta', [['d']], { maxAgents: 2 }),
      ],
    });
    const out = await h.manager.reload(next, h.factory);
    expect(out).toEqual({
      result: 'applied',
      plan: {
        added: ['delta'],
        updated: ['beta'],
        unchanged: ['alpha'],
        retired: ['gamma'],
        resurrected: [],
        global: ['globalMaxAgents'],
      },
    });
    expect(h.factoryCalls).toEqual(['delta']);
    expect(h.backend('beta').maxAgents).toBe(3);
    // New routing and caps are in force at once.
    expect(h.manager.route({ runsOn: ['d'] })?.scalerName).toBe('delta');
    expect(h.manager.route({ runsOn: ['c'] })).toBeUndefined();
    await spawnFor(h, ['b']);
    await spawnFor(h, ['b']);
    await spawnFor(h, ['d']);
    // gamma had no agents: its backend is shut down and gone.
    expect(h.backend('gamma').shutdownCalls).toBe(1);
    expect(
      h.manager
        .backendList()
        .map((b) => b.name)
        .sort(),
    ).toEqual(['alpha', 'beta', 'delta']);
  });

  it('refuses a type change and changes nothing', async () => {
    const h = await hs.make({ dispatcher: false, config: base() });
    const before = h.manager.config;
    const next = scalerConfig({
      version: 1,
      globalMaxAgents: 3,
      scalers: [
        bareMetal('alpha', [['a']], { maxAgents: 5 }),
        {
          name: 'beta',
          type: 'container',
          maxAgents: 1,
          labelSets: [{ labels: ['b'], image: 'ci/agent:1' }],
        },
        bareMetal('gamma', [['c']], { maxAgents: 1 }),
      ],
    });
    const out = await h.manager.reload(next, h.factory);
    expect(out.result).toBe('rejected');
    expect(out).toMatchObject({
      problems: [expect.stringContaining('backend type cannot change from bare-metal to container')],
    });
    expect(h.manager.config).toBe(before);
    expect(h.backend('alpha').maxAgents).toBe(1);
    expect(h.backend('alpha').reloads).toEqual([]);
    expect(h.factoryCalls).toEqual([]);
    await spawnFor(h, ['a']);
    expect((await h.manager.requestScale(job(['a']))).action).toBe('at-capacity');
  });

  it('a backend refusing its reload rolls every other backend back: all or nothing', async () => {
    const h = await hs.make({ dispatcher: false, config: base() });
    const alpha = h.backend('alpha');
    const oldSets = alpha.labelSets;
    h.backend('beta').refuseReload = ['requireSudo cannot change while a label set runs job images'];
    const next = scalerConfig({
      version: 1,
      globalMaxAgents: 10,
      scalers: [
        bareMetal('alpha', [['a'], ['a2']], { maxAgents: 4 }),
        bareMetal('beta', [['b']], { maxAgents: 2 }),
        bareMetal('gamma', [['c']], { maxAgents: 1 }),
      ],
    });
    const out = await h.manager.reload(next, h.factory);
    expect(out).toEqual({
      result: 'rejected',
      problems: ['scaler "beta": requireSudo cannot change while a label set runs job images'],
    });
    // alpha had accepted (and applied) the new settings; they were put back.
    expect(alpha.reloads[0]).toMatchObject({ valid: true, maxAgents: 4 });
    expect(alpha.labelSets).toBe(oldSets);
    expect(alpha.maxAgents).toBe(1);
    expect(h.backend('beta').maxAgents).toBe(1);
    // The manager still routes and caps by the old config.
    expect(h.manager.route({ runsOn: ['a2'] })).toBeUndefined();
    await spawnFor(h, ['a']);
    expect((await h.manager.requestScale(job(['a']))).action).toBe('at-capacity');
  });

  it('the rollback also restores the entry a backend was given (labelSets/maxAgents/entry snapshotted)', async () => {
    const h = await hs.make({ dispatcher: false, config: base() });
    const alpha = h.backend('alpha');
    const oldEntry = alpha.entry;
    h.backend('beta').refuseReload = ['no'];
    const next = scalerConfig({
      version: 1,
      scalers: [
        bareMetal('alpha', [['a']], { maxAgents: 4, orchestratorUrl: 'wss://elsewhere.example/ws' }),
        bareMetal('beta', [['b']], { maxAgents: 2 }),
        bareMetal('gamma', [['c']], { maxAgents: 1 }),
      ],
    });
    expect((await h.manager.reload(next, h.factory)).result).toBe('rejected');
    expect(alpha.entry).toEqual(oldEntry);
  });

  it('refuses a config where two scalers declare the same label set and changes nothing', async () => {
    const h = await hs.make({ dispatcher: false, config: base() });
    const before = h.manager.config;
    const next = scalerConfig({
      version: 1,
      scalers: [
        bareMetal('alpha', [['a']], { maxAgents: 1 }),
        bareMetal('beta', [['b'], ['A']], { maxAgents: 1 }),
        bareMetal('gamma', [['c']], { maxAgents: 1 }),
      ],
    });
    const out = await h.manager.reload(next, h.factory);
    expect(out).toEqual({
      result: 'rejected',
      problems: [expect.stringContaining('Label set [a] overlaps between scalers "alpha" and "beta"')],
    });
    expect(h.manager.config).toBe(before);
    expect(h.backend('beta').labelSets.map((l) => l.labels)).toEqual([['b']]);
  });

  it('a factory failure for an added scaler rolls the kept backends back', async () => {
    const h = await hs.make({ dispatcher: false, config: base() });
    h.factoryRefuses.add('delta');
    const next = scalerConfig({
      version: 1,
      scalers: [bareMetal('alpha', [['a']], { maxAgents: 4 }), bareMetal('delta', [['d']])],
    });
    const out = await h.manager.reload(next, h.factory);
    expect(out).toEqual({ result: 'rejected', problems: ['scaler "delta": cannot build "delta"'] });
    expect(h.backend('alpha').maxAgents).toBe(1);
    expect(h.manager.route({ runsOn: ['c'] })?.scalerName).toBe('gamma');
    expect(
      h.manager
        .backendList()
        .map((b) => b.name)
        .sort(),
    ).toEqual(['alpha', 'beta', 'gamma']);
  });
});

describe('retiring a removed scaler', () => {
  it('stops routing at once, keeps its running agents until they disconnect, then shuts the backend down', async () => {
    const h = await hs.make({
      config: scalerConfig({
        version: 1,
        scalers: [bareMetal('alpha', [['linux']]), bareMetal('beta', [['other']])],
      }),
    });
    const { ids } = await h.submit({ a: { runsOn: ['linux'] } });
    const alpha = h.backend('alpha');
    const agentId = alpha.spawns[0]!.agentId;
    alpha.resolveSpawn(agentId);
    await h.settle();
    await h.registerAgent(agentId);
    await h.startJob(agentId, ids[0]!);

    const out = await h.manager.reload(
      scalerConfig({ version: 1, scalers: [bareMetal('beta', [['other']])] }),
      h.factory,
    );
    expect(out).toMatchObject({ result: 'applied', plan: { retired: ['alpha'] } });
    await h.settle();
    // Routing stopped: a new linux job has no backend.
    expect(await h.manager.requestScale(job(['linux']))).toMatchObject({ action: 'no-backend' });
    // The running agent is untouched.
    expect(alpha.destroys).toEqual([]);
    expect(alpha.shutdownCalls).toBe(0);
    expect(h.manager.capBook().count('alpha')).toBe(1);
    expect(h.manager.backendList().map((b) => b.name)).toContain('alpha');
    // A periodic sweep does not retire it while the agent lives.
    await h.sweep();
    expect(alpha.shutdownCalls).toBe(0);

    await h.finishJob(agentId, ids[0]!);
    expect(await h.jobState(ids[0]!)).toBe('succeeded');
    await h.disconnect(agentId);
    expect(alpha.destroys.map((d) => d.agentId)).toEqual([agentId]);
    expect(alpha.shutdownCalls).toBe(1);
    expect(h.manager.backendList().map((b) => b.name)).toEqual(['beta']);
    expect(h.manager.capBook().count()).toBe(0);
  });

  it('re-adding a still-draining scaler resurrects the same backend', async () => {
    const h = await hs.make({ dispatcher: false, config: base() });
    const alpha = h.backend('alpha');
    await spawnFor(h, ['a']);
    const without = scalerConfig({
      version: 1,
      scalers: [bareMetal('beta', [['b']], { maxAgents: 1 }), bareMetal('gamma', [['c']], { maxAgents: 1 })],
    });
    expect(await h.manager.reload(without, h.factory)).toMatchObject({ plan: { retired: ['alpha'] } });
    expect(await h.manager.reload(base(), h.factory)).toMatchObject({
      result: 'applied',
      plan: { resurrected: ['alpha'] },
    });
    expect(h.factoryCalls).toEqual([]);
    expect(h.backend('alpha')).toBe(alpha);
    expect(h.manager.route({ runsOn: ['a'] })?.scalerName).toBe('alpha');
    // Its one agent still holds its one slot.
    expect((await h.manager.requestScale(job(['a']))).action).toBe('at-capacity');
  });

  it('re-adding a fully drained scaler builds a new backend', async () => {
    const h = await hs.make({ dispatcher: false, config: base() });
    const old = h.backend('alpha');
    const without = scalerConfig({
      version: 1,
      scalers: [bareMetal('beta', [['b']], { maxAgents: 1 }), bareMetal('gamma', [['c']], { maxAgents: 1 })],
    });
    await h.manager.reload(without, h.factory);
    expect(old.shutdownCalls).toBe(1);
    expect(await h.manager.reload(base(), h.factory)).toMatchObject({
      result: 'applied',
      plan: { added: ['alpha'] },
    });
    expect(h.factoryCalls).toEqual(['alpha']);
    expect(h.backend('alpha')).not.toBe(old);
    await spawnFor(h, ['a']);
  });
});

describe('settings for new spawns', () => {
  it('a lower maxAgents / globalMaxAgents refuses new reservations; running agents stay', async () => {
    const h = await hs.make({
      dispatcher: false,
      config: scalerConfig({
        version: 1,
        globalMaxAgents: 10,
        scalers: [
          bareMetal('alpha', [['a']], { maxAgents: 5 }),
          bareMetal('beta', [['b']], { maxAgents: 5 }),
        ],
      }),
    });
    await spawnFor(h, ['a']);
    await spawnFor(h, ['a']);
    await h.manager.reload(
      scalerConfig({
        version: 1,
        globalMaxAgents: 3,
        scalers: [
          bareMetal('alpha', [['a']], { maxAgents: 1 }),
          bareMetal('beta', [['b']], { maxAgents: 5 }),
        ],
      }),
      h.factory,
    );
    expect((await h.manager.requestScale(job(['a']))).action).toBe('at-capacity');
    expect(h.manager.capBook().count('alpha')).toBe(2);
    expect(h.backend('alpha').destroys).toEqual([]);
    await spawnFor(h, ['b']);
    expect(await h.manager.requestScale(job(['b']))).toMatchObject({
      action: 'at-capacity',
      reason: expect.stringContaining('globalMaxAgents'),
    });
  });

  it('a maxConcurrentSpawns change applies to new spawns', async () => {
    const h = await hs.make({
      dispatcher: false,
      config: scalerConfig({
        version: 1,
        scalers: [bareMetal('alpha', [['a']], { maxConcurrentSpawns: 1 })],
      }),
    });
    const b = h.backend('alpha');
    await spawnFor(h, ['a']);
    await spawnFor(h, ['a']);
    expect(b.inFlight).toBe(1);
    await h.manager.reload(
      scalerConfig({ version: 1, scalers: [bareMetal('alpha', [['a']], { maxConcurrentSpawns: 3 })] }),
      h.factory,
    );
    for (let i = 0; i < 4; i++) await spawnFor(h, ['a']);
    // One old-width spawn in flight, three new-width ones; the rest wait.
    expect(b.inFlight).toBe(4);
    expect(b.spawns).toHaveLength(4);
  });

  it('an added label set routes at once; a removed one stops routing at once', async () => {
    const h = await hs.make({
      dispatcher: false,
      config: scalerConfig({ version: 1, scalers: [bareMetal('alpha', [['a'], ['old']])] }),
    });
    await h.manager.reload(
      scalerConfig({ version: 1, scalers: [bareMetal('alpha', [['a'], ['new']])] }),
      h.factory,
    );
    expect((await h.manager.requestScale(job(['old']))).action).toBe('no-backend');
    await spawnFor(h, ['new']);
    expect(h.backend('alpha').spawns[0]!.labelSet).toEqual(['new']);
  });
});
