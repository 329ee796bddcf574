/**
 * `scaler status` shows a scaler's label sets as declared: their order and duplicates (each label
 * trimmed and lowercased). An agent's row names its label set by the matching key, which ignores
 * order and duplicates, as matching does.
 */
import { describe, expect, it } from 'vitest';
import { describeScalerStatus } from '../../../src/server/scaler-views.js';
import { useManagerHarnesses } from '../../helpers/manager-harness.js';
import { bareMetal, scalerConfig } from '../../helpers/scaler-config.js';

const hs = useManagerHarnesses();

describe('scaler status keeps the declared label order', () => {
  it('lists the label set in declared order, duplicates kept; the agent row by its matching key', async () => {
    const h = await hs.make({
      config: scalerConfig({ version: 1, scalers: [bareMetal('bm', [[' Zeta', 'alpha', 'zeta']])] }),
    });
    await h.submit({ a: { runsOn: ['alpha', 'zeta'] } });
    await h.settle();
    const s = describeScalerStatus(h.d, h.clock).scalers.find((x) => x.name === 'bm')!;
    expect(s.labelSets).toEqual([['zeta', 'alpha', 'zeta']]);
    expect(s.agents).toMatchObject([{ labelSet: 'alpha,zeta', phase: 'spawning' }]);
  });
});
