import { describe, expect, it } from 'vitest';
import { labelSetConfigSchema, networkPolicySchema, SCALER_PARSE_PARAMS } from '../../../src/config/index.js';
import { expectIssue, type FlatIssue } from './fixtures.js';
import { formatYamlPath } from '../../../src/config/index.js';

const base = { labels: ['linux'] };

function issues(input: unknown): FlatIssue[] {
  const r = labelSetConfigSchema.safeParse(input, SCALER_PARSE_PARAMS);
  return r.success ? [] : r.error.issues.map((i) => ({ path: formatYamlPath(i.path), message: i.message }));
}

function parsed(input: unknown) {
  const r = labelSetConfigSchema.safeParse(input, SCALER_PARSE_PARAMS);
  if (!r.success) throw new Error(JSON.stringify(r.error.issues));
  return r.data;
}

describe('label set defaults', () => {
  it('fills imagePullPolicy and containerSocket and leaves the rest absent', () => {
    expect(parsed(base)).toEqual({
      labels: ['linux'],
      imagePullPolicy: 'IfNotPresent',
      containerSocket: false,
    });
  });
});

describe('label set accepted values', () => {
  it.each<[string, Record<string, unknown>, (out: ReturnType<typeof parsed>) => unknown, unknown]>([
    [
      'labels folded, order and duplicates kept',
      { labels: [' Linux', 'docker', 'LINUX'] },
      (o) => o.labels,
      ['linux', 'docker', 'linux'],
    ],
    ['image', { image: 'ghcr.io/x/agent:1' }, (o) => o.image, 'ghcr.io/x/agent:1'],
    ['imagePullPolicy Always', { imagePullPolicy: 'Always' }, (o) => o.imagePullPolicy, 'Always'],
    ['imagePullPolicy Never', { imagePullPolicy: 'Never' }, (o) => o.imagePullPolicy, 'Never'],
    ['binaryPath', { binaryPath: '/bin/agent' }, (o) => o.binaryPath, '/bin/agent'],
    [
      'resources mirrored',
      { resources: { requests: { cpus: 1 } } },
      (o) => o.resources,
      { requests: { cpus: 1 }, limits: { cpus: 1 } },
    ],
    ['resources {} -> undefined', { resources: {} }, (o) => o.resources, undefined],
    [
      'volumes',
      { volumes: ['/a:/b', 'cache:/c:ro', '/x:/y:rw'] },
      (o) => o.volumes,
      ['/a:/b', 'cache:/c:ro', '/x:/y:rw'],
    ],
    ['containerSocket', { containerSocket: true }, (o) => o.containerSocket, true],
    ['env', { env: { FOO: 'bar', _X1: '' } }, (o) => o.env, { FOO: 'bar', _X1: '' }],
    ['backpressureMode pause', { backpressureMode: 'pause' }, (o) => o.backpressureMode, 'pause'],
    ['backpressureMode drop', { backpressureMode: 'drop' }, (o) => o.backpressureMode, 'drop'],
    ['networkPolicy denyAll default', { networkPolicy: {} }, (o) => o.networkPolicy, { denyAll: false }],
    [
      'networkPolicy full',
      {
        networkPolicy: {
          allowlist: ['10.1.0.0/16'],
          denyAll: true,
          hostAccess: ['53', '*:8080', '10.0.0.1:*'],
        },
      },
      (o) => o.networkPolicy,
      { allowlist: ['10.1.0.0/16'], denyAll: true, hostAccess: ['53', '*:8080', '10.0.0.1:*'] },
    ],
    [
      'networkPolicy hostAccess []',
      { networkPolicy: { hostAccess: [] } },
      (o) => o.networkPolicy?.hostAccess,
      [],
    ],
    [
      'networkPolicy unknown keys stripped',
      { networkPolicy: { extra: 1 } },
      (o) => o.networkPolicy,
      { denyAll: false },
    ],
    ['rootfsPath', { rootfsPath: '/r.ext4' }, (o) => o.rootfsPath, '/r.ext4'],
    ['kernelPath', { kernelPath: '/k' }, (o) => o.kernelPath, '/k'],
    ['vcpuCount', { vcpuCount: 4 }, (o) => o.vcpuCount, 4],
    ['memSizeMib', { memSizeMib: 2048 }, (o) => o.memSizeMib, 2048],
    ['overlayDriveSizeMib', { overlayDriveSizeMib: 1 }, (o) => o.overlayDriveSizeMib, 1],
  ])('%s', (_name, patch, pick, expected) => {
    expect(pick(parsed({ ...base, ...patch }))).toEqual(expected);
  });
});

describe('label set rejections', () => {
  it.each<[string, Record<string, unknown>, string, string]>([
    ['labels missing', { labels: undefined }, 'labels', 'required: expected a list'],
    ['labels empty', { labels: [] }, 'labels', 'at least one label'],
    ['labels not a list', { labels: 'linux' }, 'labels', 'expected a list'],
    ['label blank', { labels: ['linux', '  '] }, 'labels[1]', 'must not be empty or blank'],
    ['label empty', { labels: [''] }, 'labels[0]', 'must not be empty'],
    ['label reserved', { labels: ['kici:os:linux'] }, 'labels[0]', 'reserved "kici:" prefix'],
    ['label reserved any case', { labels: ['KICI:Scaler:x'] }, 'labels[0]', 'reserved'],
    ['label with comma', { labels: ['a,b'] }, 'labels[0]', 'commas'],
    ['label not a string', { labels: [5] }, 'labels[0]', 'expected a string'],
    ['image empty', { image: '' }, 'image', 'must not be empty'],
    ['image number', { image: 5 }, 'image', 'expected a string'],
    [
      'imagePullPolicy lowercase',
      { imagePullPolicy: 'always' },
      'imagePullPolicy',
      'expected one of "Always", "IfNotPresent", "Never"',
    ],
    ['binaryPath empty', { binaryPath: '' }, 'binaryPath', 'must not be empty'],
    ['resources flat', { resources: { cpus: 1 } }, 'resources', 'nest it under limits'],
    [
      'resources bad memory',
      { resources: { limits: { memory: '2gb' } } },
      'resources.limits.memory',
      'Invalid memory format: "2gb"',
    ],
    ['volumes bad', { volumes: ['/only'] }, 'volumes[0]', 'host:container'],
    ['volumes bad mode', { volumes: ['/a:/b:rx'] }, 'volumes[0]', 'host:container'],
    ['containerSocket string', { containerSocket: 'yes' }, 'containerSocket', 'expected true or false'],
    ['env non-string value', { env: { FOO: 1 } }, 'env.FOO', 'quote it in YAML: "1"'],
    ['env bad name', { env: { 'A-B': 'x' } }, 'env["A-B"]', 'not an environment variable name'],
    [
      'backpressureMode bad',
      { backpressureMode: 'block' },
      'backpressureMode',
      'expected one of "pause", "drop"',
    ],
    [
      'networkPolicy allowlist',
      { networkPolicy: { allowlist: ['example.com'] } },
      'networkPolicy.allowlist[0]',
      'not an IP address or CIDR',
    ],
    [
      'networkPolicy denyAll',
      { networkPolicy: { denyAll: 'true' } },
      'networkPolicy.denyAll',
      'expected true or false',
    ],
    [
      'networkPolicy hostAccess',
      { networkPolicy: { hostAccess: ['db.local:5432'] } },
      'networkPolicy.hostAccess[0]',
      'host names are not allowed',
    ],
    ['networkPolicy list', { networkPolicy: [] }, 'networkPolicy', 'expected a mapping'],
    ['rootfsPath empty', { rootfsPath: '' }, 'rootfsPath', 'must not be empty'],
    ['kernelPath empty', { kernelPath: '' }, 'kernelPath', 'must not be empty'],
    ['vcpuCount 0', { vcpuCount: 0 }, 'vcpuCount', 'greater than 0'],
    ['vcpuCount fraction', { vcpuCount: 1.5 }, 'vcpuCount', 'whole number'],
    ['memSizeMib negative', { memSizeMib: -1 }, 'memSizeMib', 'greater than 0'],
    ['overlayDriveSizeMib 0', { overlayDriveSizeMib: 0 }, 'overlayDriveSizeMib', 'greater than 0'],
    ['unknown key (strict)', { imagePolicy: 'Always' }, '(top level)', 'unknown key "imagePolicy"'],
    ['typo suggestion', { binarypath: '/x' }, '(top level)', 'did you mean "binaryPath"?'],
  ])('%s', (_name, patch, path, message) => {
    expectIssue(issues({ ...base, ...patch }), { path, message });
  });
});

describe('networkPolicySchema', () => {
  it('is optional', () => expect(networkPolicySchema.parse(undefined)).toBeUndefined());
});
