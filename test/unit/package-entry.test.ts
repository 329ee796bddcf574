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

describe('package main entry: container backend', () => {
  it('exports the container backend names with their declared values', () => {
    expect(pkg.ISOLATED_NETWORK_NAME).toBe('kici-agent-net');
    expect(pkg.ISOLATED_NETWORK_GATEWAY).toBe('172.30.0.1');
    expect(pkg.AGENT_CONTAINER_PIDS_LIMIT).toBe(4096);
    expect(pkg.KICI_RUNTIME_DOCKER_LABEL).toBe('kici:runtime:docker');
    expect(pkg.KICI_RUNTIME_PODMAN_LABEL).toBe('kici:runtime:podman');
    expect(pkg.buildAgentHostConfig({}).PidsLimit).toBe(4096);
    expect(typeof pkg.canAgentRunJob).toBe('function');
    expect(typeof pkg.ContainerScalerBackend.getRequiredTools).toBe('function');
    for (const m of [
      'spawn',
      'getScalerContext',
      'destroy',
      'getLogCapture',
      'shutdownAll',
      'reload',
      'cleanupOrphans',
      'reapUnowned',
    ])
      expect(typeof (pkg.ContainerScalerBackend.prototype as unknown as Record<string, unknown>)[m], m).toBe(
        'function',
      );
  });
});
