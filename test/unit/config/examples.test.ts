import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { loadScalerConfig, loadScalerConfigForPeople, SCALER_TYPES } from '../../../src/config/index.js';

const example = fileURLToPath(new URL('../../../examples/scalers.yaml', import.meta.url));

describe('examples/scalers.yaml', () => {
  it('loads and validates with no problems and no warnings', async () => {
    const result = await loadScalerConfigForPeople(example);
    if (!result.ok) throw new Error(result.problems.join('\n'));
    expect(result.warnings).toEqual([]);
  });

  it('shows every backend type and the features the docs point at', async () => {
    const config = await loadScalerConfig(example);
    expect(new Set(config.scalers.map((s) => s.type))).toEqual(new Set(SCALER_TYPES));
    expect(config.scalers.some((s) => s.warmPool?.enabled)).toBe(true);
    expect(config.scalers.some((s) => s.resourceCap)).toBe(true);
    expect(config.scalers.some((s) => s.machinePool)).toBe(true);
    expect(config.scalers.some((s) => s.platform)).toBe(true);
    expect(config.scalers.some((s) => s.mandatoryLabels.length > 0)).toBe(true);
    expect(config.scalers.some((s) => s.roles !== undefined)).toBe(true);
    const sets = config.scalers.flatMap((s) => s.labelSets);
    expect(sets.some((l) => l.networkPolicy)).toBe(true);
    expect(sets.some((l) => l.resources)).toBe(true);
    expect(config.globalResourceCap).toBeDefined();
    expect(config.machinePools?.length).toBeGreaterThan(0);
    expect(config.defaults?.resources).toBeDefined();
    expect(config.firecracker).toBeDefined();
  });
});
