import { describe, expect, it } from 'vitest';
import { firecrackerNetworkSchema, scalerFileSchema } from '../../../src/config/index.js';
import { expectIssue, fileWith, issuesOf, minimalEntry, parsedOk } from './fixtures.js';

const entry = minimalEntry('container');
const file = (patch: Record<string, unknown>) => ({ ...fileWith(entry), ...patch });

describe('top-level defaults and values', () => {
  it('applies defaults and leaves optional blocks absent', () => {
    const out = parsedOk(fileWith());
    expect(out).toEqual({ version: 1, globalMaxAgents: 50, scalers: [] });
  });

  it.each<[string, Record<string, unknown>, (c: ReturnType<typeof parsedOk>) => unknown, unknown]>([
    ['globalMaxAgents', { globalMaxAgents: 3 }, (c) => c.globalMaxAgents, 3],
    [
      'defaults.resources mirrored',
      { defaults: { resources: { limits: { cpus: 1 } } } },
      (c) => c.defaults?.resources,
      { requests: { cpus: 1 }, limits: { cpus: 1 } },
    ],
    [
      'defaults unknown keys stripped',
      { defaults: { resources: { requests: { cpus: 1 } }, other: 1 } },
      (c) => Object.keys(c.defaults!),
      ['resources'],
    ],
    ['defaults empty', { defaults: {} }, (c) => c.defaults, {}],
    [
      'globalResourceCap',
      { globalResourceCap: { maxCpu: 8, maxMemory: '16g' } },
      (c) => c.globalResourceCap,
      { maxCpu: 8, maxMemoryBytes: 16 * 1024 ** 3 },
    ],
    [
      'machinePools',
      { machinePools: [{ name: 'p', cap: { maxCpu: 1 } }] },
      (c) => c.machinePools,
      [{ name: 'p', cap: { maxCpu: 1 } }],
    ],
    ['unknown top-level key stripped', { globalMaxAgent: 5 }, (c) => 'globalMaxAgent' in c, false],
    [
      'firecracker defaults',
      { firecracker: {} },
      (c) => c.firecracker,
      {
        cidr: '10.0.0.0/24',
        bridgeName: 'kici-br0',
        gateway: '10.0.0.1',
        netmask: '255.255.255.0',
        table: 'kici',
        autoProvisionHost: true,
      },
    ],
    [
      'firecracker values',
      {
        firecracker: {
          cidr: '10.9.0.0/16',
          gateway: '10.9.0.1',
          netmask: '255.255.0.0',
          bridgeName: 'br1',
          table: 'kici_b',
          autoProvisionHost: false,
        },
      },
      (c) => c.firecracker,
      {
        cidr: '10.9.0.0/16',
        bridgeName: 'br1',
        gateway: '10.9.0.1',
        netmask: '255.255.0.0',
        table: 'kici_b',
        autoProvisionHost: false,
      },
    ],
    [
      'firecracker unknown key stripped',
      { firecracker: { mtu: 1500 } },
      (c) => 'mtu' in c.firecracker!,
      false,
    ],
  ])('%s', (_n, patch, pick, expected) => {
    expect(pick(parsedOk(file(patch)))).toEqual(expected);
  });

  it('machinePool reference to a declared pool is accepted', () => {
    const out = parsedOk({
      ...fileWith({ ...entry, machinePool: 'p' }),
      machinePools: [{ name: 'p', cap: {} }],
    });
    expect(out.scalers[0]!.machinePool).toBe('p');
  });
});

describe('top-level rejections', () => {
  it.each<[string, unknown, string, string]>([
    ['version missing', { scalers: [] }, 'version', 'required: add version: 1'],
    ['version 2', { version: 2, scalers: [] }, 'version', 'must be 1, got 2'],
    ['version "1"', { version: '1', scalers: [] }, 'version', 'must be 1, got "1"'],
    ['scalers missing', { version: 1 }, 'scalers', 'required: expected a list'],
    ['scalers a mapping', { version: 1, scalers: {} }, 'scalers', 'expected a list, got a mapping'],
    ['root null (empty file)', null, '(top level)', 'expected a mapping, got an empty value'],
    ['root a list', [], '(top level)', 'expected a mapping, got a list'],
    ['root a string', 'version: 1', '(top level)', 'expected a mapping, got the string'],
    ['globalMaxAgents 0', file({ globalMaxAgents: 0 }), 'globalMaxAgents', 'greater than 0'],
    ['globalMaxAgents fraction', file({ globalMaxAgents: 2.5 }), 'globalMaxAgents', 'whole number'],
    [
      'globalMaxAgents Infinity',
      file({ globalMaxAgents: Infinity }),
      'globalMaxAgents',
      'expected a number, got the number Infinity',
    ],
    ['defaults a list', file({ defaults: [] }), 'defaults', 'expected a mapping'],
    [
      'defaults flat resources',
      file({ defaults: { resources: { memory: '1g' } } }),
      'defaults.resources',
      'nest it under limits',
    ],
    [
      'globalResourceCap bad memory',
      file({ globalResourceCap: { maxMemory: '1x' } }),
      'globalResourceCap.maxMemory',
      'Invalid memory format: "1x"',
    ],
    [
      'globalResourceCap strict',
      file({ globalResourceCap: { maxGpu: 1 } }),
      'globalResourceCap',
      'unknown key "maxGpu"',
    ],
    [
      'machinePools item strict',
      file({ machinePools: [{ name: 'p', cap: {}, size: 1 }] }),
      'machinePools[0]',
      'unknown key "size"',
    ],
    [
      'machinePools name empty',
      file({ machinePools: [{ name: '', cap: {} }] }),
      'machinePools[0].name',
      'must not be empty',
    ],
    [
      'machinePools cap missing',
      file({ machinePools: [{ name: 'p' }] }),
      'machinePools[0].cap',
      'required: expected a mapping',
    ],
    [
      'machinePools cap memory',
      file({ machinePools: [{ name: 'p', cap: { maxMemory: '2Gi' } }] }),
      'machinePools[0].cap.maxMemory',
      'Invalid memory format: "2Gi"',
    ],
    [
      'machinePools duplicate name',
      file({
        machinePools: [
          { name: 'p', cap: {} },
          { name: 'q', cap: {} },
          { name: 'p', cap: {} },
        ],
      }),
      'machinePools[2].name',
      'machine pool "p" is already defined at machinePools[0]',
    ],
    [
      'unknown machinePool',
      fileWith({ ...entry, machinePool: 'nope' }),
      'scalers[0].machinePool',
      'references unknown machinePool "nope"; define it under top-level machinePools[]',
    ],
    [
      'machinePool with no pools at all',
      { ...fileWith(entry, { ...minimalEntry('event'), machinePool: 'p' }) },
      'scalers[1].machinePool',
      'unknown machinePool "p"',
    ],
    ['firecracker cidr', file({ firecracker: { cidr: '10.0.0.0' } }), 'firecracker.cidr', 'not an IPv4 CIDR'],
    [
      'firecracker gateway',
      file({ firecracker: { gateway: 'gw' } }),
      'firecracker.gateway',
      'not an IPv4 address',
    ],
    [
      'firecracker gateway outside',
      file({ firecracker: { gateway: '10.0.1.1' } }),
      'firecracker.gateway',
      'not a host address in 10.0.0.0/24',
    ],
    [
      'firecracker gateway = network',
      file({ firecracker: { gateway: '10.0.0.0' } }),
      'firecracker.gateway',
      'not a host address',
    ],
    [
      'firecracker netmask',
      file({ firecracker: { netmask: '255.255.0.0' } }),
      'firecracker.netmask',
      'does not match the /24',
    ],
    [
      'firecracker netmask bad',
      file({ firecracker: { netmask: 'x' } }),
      'firecracker.netmask',
      'not an IPv4 address',
    ],
    [
      'firecracker bridge too long',
      file({ firecracker: { bridgeName: 'a-very-long-bridge' } }),
      'firecracker.bridgeName',
      '1–15',
    ],
    ['firecracker table', file({ firecracker: { table: '1kici' } }), 'firecracker.table', 'nft table name'],
    [
      'firecracker autoProvisionHost',
      file({ firecracker: { autoProvisionHost: 'yes' } }),
      'firecracker.autoProvisionHost',
      'expected true or false',
    ],
  ])('%s', (_n, input, path, message) => {
    expectIssue(issuesOf(input), { path, message });
  });

  it('unknown keys in the top level are not errors', () => {
    expect(issuesOf(file({ scalerz: [] }))).toEqual([]);
  });
});

describe('exported schema shapes', () => {
  it('scalerFileSchema and firecrackerNetworkSchema are objects with the declared keys', () => {
    expect(Object.keys(scalerFileSchema.shape).sort()).toEqual([
      'defaults',
      'firecracker',
      'globalMaxAgents',
      'globalResourceCap',
      'machinePools',
      'scalers',
      'version',
    ]);
    expect(Object.keys(firecrackerNetworkSchema.shape).sort()).toEqual([
      'autoProvisionHost',
      'bridgeName',
      'cidr',
      'gateway',
      'netmask',
      'table',
    ]);
  });
});
