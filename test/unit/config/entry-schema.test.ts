import { describe, expect, it } from 'vitest';
import { DEFAULT_MAX_CONCURRENT_SPAWNS, SCALER_TYPES, type ScalerType } from '../../../src/config/index.js';
import { expectIssue, fileWith, issuesOf, minimalEntry, parsedOk } from './fixtures.js';

function entryOut(type: ScalerType, patch: Record<string, unknown> = {}) {
  return parsedOk(fileWith({ ...minimalEntry(type), ...patch })).scalers[0]!;
}

function entryIssues(type: ScalerType, patch: Record<string, unknown>) {
  return issuesOf(fileWith({ ...minimalEntry(type), ...patch }));
}

describe('entry defaults apply to every type', () => {
  const defaults: [string, unknown][] = [
    ['maxConcurrentSpawns', DEFAULT_MAX_CONCURRENT_SPAWNS],
    ['networkIsolation', true],
    ['mandatoryLabels', []],
    ['roles', undefined],
    ['runtime', 'auto'],
    ['enforceCgroups', false],
    ['chrootBaseDir', '/srv/jailer'],
    ['vcpuCount', 2],
    ['memSizeMib', 512],
    ['requireSudo', false],
    ['claimTtlSeconds', 300],
    ['agentTokenTtlSeconds', 600],
    ['warmPool', undefined],
    ['platform', undefined],
    ['resourceCap', undefined],
    ['machinePool', undefined],
    ['orchestratorUrl', undefined],
    ['extraHosts', undefined],
  ];
  for (const type of SCALER_TYPES) {
    it.each(defaults)(`${type}: %s defaults to %j`, (field, value) => {
      expect((entryOut(type) as Record<string, unknown>)[field]).toEqual(value);
    });
  }

  it('DEFAULT_MAX_CONCURRENT_SPAWNS is 8', () => expect(DEFAULT_MAX_CONCURRENT_SPAWNS).toBe(8));
});

describe('entry accepted values', () => {
  it.each<[string, Record<string, unknown>, string, unknown]>([
    ['maxConcurrentSpawns', { maxConcurrentSpawns: 1 }, 'maxConcurrentSpawns', 1],
    [
      'orchestratorUrl ws',
      { orchestratorUrl: 'ws://10.0.0.1:8080' },
      'orchestratorUrl',
      'ws://10.0.0.1:8080',
    ],
    [
      'orchestratorUrl https',
      { orchestratorUrl: 'https://ci.example.com' },
      'orchestratorUrl',
      'https://ci.example.com',
    ],
    ['extraHosts', { extraHosts: ['a:1.2.3.4'] }, 'extraHosts', ['a:1.2.3.4']],
    ['networkIsolation false', { networkIsolation: false }, 'networkIsolation', false],
    ['warmPool defaults', { warmPool: {} }, 'warmPool', { enabled: false, size: 0, idleTimeoutSeconds: 300 }],
    [
      'warmPool set',
      { warmPool: { enabled: true, size: 3, idleTimeoutSeconds: 0.5 } },
      'warmPool',
      { enabled: true, size: 3, idleTimeoutSeconds: 0.5 },
    ],
    ['mandatoryLabels folded, order kept', { mandatoryLabels: [' Linux '] }, 'mandatoryLabels', ['linux']],
    ['platform', { platform: { os: 'linux', arch: 'x64' } }, 'platform', { os: 'linux', arch: 'x64' }],
    ['roles all', { roles: ['all'] }, 'roles', undefined],
    ['roles all mixed', { roles: ['builder', 'all'] }, 'roles', undefined],
    ['roles []', { roles: [] }, 'roles', []],
    ['roles builder', { roles: ['builder'] }, 'roles', ['builder']],
    ['roles both', { roles: ['init-runner', 'builder'] }, 'roles', ['init-runner', 'builder']],
    [
      'resourceCap',
      { resourceCap: { maxCpu: 2, maxMemory: '1g' } },
      'resourceCap',
      { maxCpu: 2, maxMemoryBytes: 1024 ** 3 },
    ],
    ['host', { host: 'tcp://h:2376' }, 'host', 'tcp://h:2376'],
    ['socketPath', { socketPath: '/run/docker.sock' }, 'socketPath', '/run/docker.sock'],
    ['runtime podman', { runtime: 'podman' }, 'runtime', 'podman'],
    ['runtime docker', { runtime: 'docker' }, 'runtime', 'docker'],
    ['enforceCgroups', { enforceCgroups: true }, 'enforceCgroups', true],
    ['chrootBaseDir', { chrootBaseDir: '/j' }, 'chrootBaseDir', '/j'],
    ['uid 0', { uid: 0 }, 'uid', 0],
    ['gid 0', { gid: 0 }, 'gid', 0],
    ['vcpuCount', { vcpuCount: 8 }, 'vcpuCount', 8],
    ['memSizeMib', { memSizeMib: 128 }, 'memSizeMib', 128],
    ['requireSudo', { requireSudo: true }, 'requireSudo', true],
    [
      'provisioningTargets webhook',
      { provisioningTargets: ['webhook:http://h/x'] },
      'provisioningTargets',
      ['webhook:http://h/x'],
    ],
    ['claimTtlSeconds', { claimTtlSeconds: 60 }, 'claimTtlSeconds', 60],
    ['agentTokenTtlSeconds', { agentTokenTtlSeconds: 60 }, 'agentTokenTtlSeconds', 60],
    ['name with dots', { name: 'pool.a_b-1' }, 'name', 'pool.a_b-1'],
  ])('%s', (_n, patch, field, value) => {
    expect((entryOut('container', patch) as Record<string, unknown>)[field]).toEqual(value);
  });
});

describe('entry rejections', () => {
  it.each<[string, Record<string, unknown>, string, string]>([
    ['name missing', { name: undefined }, 'scalers[0].name', 'expected a string'],
    ['name empty', { name: '' }, 'scalers[0].name', 'must be 1–63 letters'],
    ['name with space', { name: 'a b' }, 'scalers[0].name', 'must be 1–63 letters'],
    ['name with comma', { name: 'a,b' }, 'scalers[0].name', 'must be 1–63 letters'],
    ['name too long', { name: 'a'.repeat(64) }, 'scalers[0].name', 'must be 1–63 letters'],
    [
      'type missing',
      { type: undefined },
      'scalers[0].type',
      'expected one of "container", "bare-metal", "firecracker", "event"',
    ],
    [
      'type docker (renamed)',
      { type: 'docker' },
      'scalers[0].type',
      'type "docker" was renamed; use type: container',
    ],
    ['type kubernetes', { type: 'kubernetes' }, 'scalers[0].type', 'expected one of'],
    ['maxAgents missing', { maxAgents: undefined }, 'scalers[0].maxAgents', 'required: expected a number'],
    ['maxAgents 0', { maxAgents: 0 }, 'scalers[0].maxAgents', 'greater than 0'],
    ['maxAgents fraction', { maxAgents: 1.5 }, 'scalers[0].maxAgents', 'whole number'],
    ['maxAgents string', { maxAgents: '5' }, 'scalers[0].maxAgents', 'expected a number, got the string "5"'],
    ['maxConcurrentSpawns 0', { maxConcurrentSpawns: 0 }, 'scalers[0].maxConcurrentSpawns', 'greater than 0'],
    ['labelSets missing', { labelSets: undefined }, 'scalers[0].labelSets', 'required: expected a list'],
    ['labelSets empty', { labelSets: [] }, 'scalers[0].labelSets', 'at least one label set'],
    [
      'orchestratorUrl not a url',
      { orchestratorUrl: 'localhost:8080' },
      'scalers[0].orchestratorUrl',
      'not a ws://',
    ],
    ['orchestratorUrl ftp', { orchestratorUrl: 'ftp://h' }, 'scalers[0].orchestratorUrl', 'not a ws://'],
    ['extraHosts not a list', { extraHosts: 'a:1.2.3.4' }, 'scalers[0].extraHosts', 'expected a list'],
    [
      'networkIsolation string',
      { networkIsolation: 'no' },
      'scalers[0].networkIsolation',
      'expected true or false',
    ],
    [
      'warmPool unknown key',
      { warmPool: { enable: true } },
      'scalers[0].warmPool',
      'did you mean "enabled"?',
    ],
    ['warmPool size negative', { warmPool: { size: -1 } }, 'scalers[0].warmPool.size', 'at least 0'],
    ['warmPool size fraction', { warmPool: { size: 1.5 } }, 'scalers[0].warmPool.size', 'whole number'],
    [
      'warmPool idle 0',
      { warmPool: { idleTimeoutSeconds: 0 } },
      'scalers[0].warmPool.idleTimeoutSeconds',
      'greater than 0',
    ],
    [
      'warmPool enabled string',
      { warmPool: { enabled: 'yes' } },
      'scalers[0].warmPool.enabled',
      'expected true or false',
    ],
    [
      'mandatoryLabels reserved',
      { mandatoryLabels: ['Kici:role:builder'] },
      'scalers[0].mandatoryLabels[0]',
      'reserved "kici:" prefix',
    ],
    [
      'mandatoryLabels blank',
      { mandatoryLabels: [' '] },
      'scalers[0].mandatoryLabels[0]',
      'must not be empty',
    ],
    [
      'platform os',
      { platform: { os: 'freebsd', arch: 'x64' } },
      'scalers[0].platform.os',
      'expected one of "linux", "macos", "windows"',
    ],
    [
      'platform arch',
      { platform: { os: 'linux', arch: 'amd64' } },
      'scalers[0].platform.arch',
      'expected one of "x64", "arm64"',
    ],
    ['platform missing arch', { platform: { os: 'linux' } }, 'scalers[0].platform.arch', 'required'],
    [
      'platform strict',
      { platform: { os: 'linux', arch: 'x64', libc: 'musl' } },
      'scalers[0].platform',
      'unknown key "libc"',
    ],
    [
      'roles unknown',
      { roles: ['deployer'] },
      'scalers[0].roles[0]',
      'expected one of "builder", "init-runner", "all"',
    ],
    ['roles string', { roles: 'all' }, 'scalers[0].roles', 'expected a list'],
    [
      'resourceCap memory',
      { resourceCap: { maxMemory: '1 gig' } },
      'scalers[0].resourceCap.maxMemory',
      'Invalid memory format: "1 gig"',
    ],
    ['resourceCap strict', { resourceCap: { cpus: 1 } }, 'scalers[0].resourceCap', 'unknown key "cpus"'],
    ['machinePool empty', { machinePool: '' }, 'scalers[0].machinePool', 'must not be empty'],
    ['host empty', { host: '' }, 'scalers[0].host', 'must not be empty'],
    ['socketPath number', { socketPath: 1 }, 'scalers[0].socketPath', 'expected a string'],
    [
      'runtime bad',
      { runtime: 'containerd' },
      'scalers[0].runtime',
      'expected one of "docker", "podman", "auto"',
    ],
    [
      'enforceCgroups string',
      { enforceCgroups: 'true' },
      'scalers[0].enforceCgroups',
      'expected true or false',
    ],
    ['firecrackerPath empty', { firecrackerPath: '' }, 'scalers[0].firecrackerPath', 'must not be empty'],
    ['jailerPath number', { jailerPath: 5 }, 'scalers[0].jailerPath', 'expected a string'],
    ['kernelPath empty', { kernelPath: '' }, 'scalers[0].kernelPath', 'must not be empty'],
    ['chrootBaseDir empty', { chrootBaseDir: '' }, 'scalers[0].chrootBaseDir', 'must not be empty'],
    ['uid negative', { uid: -1 }, 'scalers[0].uid', 'at least 0'],
    ['gid fraction', { gid: 1.5 }, 'scalers[0].gid', 'whole number'],
    ['vcpuCount 0', { vcpuCount: 0 }, 'scalers[0].vcpuCount', 'greater than 0'],
    ['memSizeMib 0', { memSizeMib: 0 }, 'scalers[0].memSizeMib', 'greater than 0'],
    ['requireSudo string', { requireSudo: 'yes' }, 'scalers[0].requireSudo', 'expected true or false'],
    [
      'provisioningTargets bare',
      { provisioningTargets: ['org/repo'] },
      'scalers[0].provisioningTargets[0]',
      'expected job:<file> or webhook:',
    ],
    [
      'provisioningTargets empty job',
      { provisioningTargets: ['job:'] },
      'scalers[0].provisioningTargets[0]',
      'not a provisioning target',
    ],
    [
      'provisioningTargets webhook ftp',
      { provisioningTargets: ['webhook:ftp://x'] },
      'scalers[0].provisioningTargets[0]',
      'not a provisioning target',
    ],
    ['claimTtlSeconds 0', { claimTtlSeconds: 0 }, 'scalers[0].claimTtlSeconds', 'greater than 0'],
    [
      'agentTokenTtlSeconds fraction',
      { agentTokenTtlSeconds: 0.5 },
      'scalers[0].agentTokenTtlSeconds',
      'whole number',
    ],
    [
      'unknown key (strict)',
      { maxagents: 1 },
      'scalers[0]',
      'unknown key "maxagents" (did you mean "maxAgents"?)',
    ],
    [
      'label set error nests',
      { labelSets: [{ labels: ['x'], image: 'i', vcpuCount: 0 }] },
      'scalers[0].labelSets[0].vcpuCount',
      'greater than 0',
    ],
  ])('%s', (_n, patch, path, message) => {
    expectIssue(entryIssues('container', patch), { path, message });
  });

  it('an entry that is not a mapping is reported, not crashed on', () => {
    expectIssue(issuesOf(fileWith('oops' as unknown as Record<string, unknown>)), {
      path: 'scalers[0]',
      message: 'expected a mapping',
    });
    expectIssue(issuesOf(fileWith(null as unknown as Record<string, unknown>)), {
      path: 'scalers[0]',
      message: 'expected a mapping, got an empty value',
    });
  });
});
