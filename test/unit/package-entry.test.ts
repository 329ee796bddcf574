import { describe, expect, it } from 'vitest';
import * as pkg from '../../src/index.js';

describe('package main entry', () => {
  it('exports the seed-declared config API with its declared values', () => {
    expect(pkg.DEFAULT_MAX_CONCURRENT_SPAWNS).toBe(8);
    expect(pkg.parseMemoryString('512m')).toBe(536870912);
    expect(pkg.parseMemoryString('2G')).toBe(2147483648);
    expect(typeof pkg.loadScalerConfig).toBe('function');
    for (const schema of [
      pkg.networkPolicySchema,
      pkg.labelSetConfigSchema,
      pkg.firecrackerNetworkSchema,
      pkg.scalerFileSchema,
    ]) {
      expect(typeof schema.safeParse).toBe('function');
    }
    expect(pkg.firecrackerNetworkSchema.parse({})).toMatchObject({
      cidr: '10.0.0.0/24',
      bridgeName: 'kici-br0',
      table: 'kici',
    });
  });
});
