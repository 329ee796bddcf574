/**
 * Retiring scalers were invisible: a scaler removed by a reload vanished from `scaler status` while
 * its agents still ran. It now stays listed, marked retiring, with its agents, until the last one
 * is gone; then it disappears.
 */
import { describe, expect, it } from 'vitest';
import { describeScalerStatus } from '../../../src/server/scaler-views.js';
import { useManagerHarnesses } from '../../helpers/manager-harness.js';
import { bareMetal, scalerConfig } from '../../helpers/scaler-config.js';

const hs = useManagerHarnesses();

describe('scaler status of a retiring scaler', () => {
  it('shows it retiring with its running agent until the agent is gone, then drops it', async () => {
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
    expect((await h.registerAgent(agentId)).ok).toBe(true);
    await h.startJob(agentId, ids[0]!);
    const before = describeScalerStatus(h.d, h.clock).scalers.find((s) => s.name === 'alpha');
    expect(before).toMatchObject({ retiring: false, agents: [{ agentId, phase: 'busy' }] });

    const out = await h.manager.reload(
      scalerConfig({ version: 1, scalers: [bareMetal('beta', [['other']])] }),
      h.factory,
    );
    expect(out).toMatchObject({ result: 'applied', plan: { retired: ['alpha'] } });
    await h.advance(5_000);
    const during = describeScalerStatus(h.d, h.clock);
    expect(during.scalers.map((s) => s.name)).toEqual(['beta', 'alpha']);
    expect(during.scalers.find((s) => s.name === 'beta')).toMatchObject({ retiring: false, agents: [] });
    expect(during.scalers.find((s) => s.name === 'alpha')).toMatchObject({
      name: 'alpha',
      type: 'bare-metal',
      retiring: true,
      retiringForMs: 5_000,
      active: 1,
      registered: 1,
      reserved: 1,
      agents: [{ agentId, phase: 'busy', boundJobId: ids[0], warm: false }],
    });

    // The job ends and the single-use agent leaves: the retired scaler is gone from the status.
    await h.finishJob(agentId, ids[0]!);
    await h.disconnect(agentId);
    const after = describeScalerStatus(h.d, h.clock);
    expect(after.scalers.map((s) => s.name)).toEqual(['beta']);
  });
});
