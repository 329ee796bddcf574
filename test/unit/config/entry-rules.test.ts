import { describe, expect, it } from 'vitest';
import { isUnsafeBatchPath, type ScalerType } from '../../../src/config/index.js';
import { expectIssue, fileWith, issuesOf, minimalEntry, parsedOk } from './fixtures.js';

const at = (rest: string) => `scalers[0].${rest}`;

function issuesFor(type: ScalerType, patch: Record<string, unknown>, host?: NodeJS.Platform) {
  return issuesOf(fileWith({ ...minimalEntry(type), ...patch }), host);
}

describe('rule 1: event scalers need provisioning targets', () => {
  it.each([
    ['missing', { provisioningTargets: undefined }],
    ['empty', { provisioningTargets: [] }],
  ])('%s', (_n, patch) => {
    expectIssue(issuesFor('event', patch), {
      path: at('provisioningTargets'),
      message: 'at least one provisioning target',
    });
  });
  it('other types do not need them', () => {
    expect(issuesFor('container', { provisioningTargets: undefined })).toEqual([]);
  });
});

describe('rule 2: container label sets need an image', () => {
  it('missing image is reported per label set', () => {
    const issues = issuesFor('container', {
      labelSets: [{ labels: ['a'], image: 'i' }, { labels: ['b'] }, { labels: ['c'] }],
    });
    expectIssue(issues, {
      path: at('labelSets[1].image'),
      message: 'container scalers need an agent image (required)',
    });
    expectIssue(issues, { path: at('labelSets[2].image'), message: 'container scalers need an agent image' });
    expect(issues.filter((i) => i.path === at('labelSets[0].image'))).toEqual([]);
  });
  it('other types do not need it', () => {
    expect(issuesFor('event', { labelSets: [{ labels: ['x'] }] })).toEqual([]);
  });
});

describe('rule 3: bare-metal label sets need binaryPath or image', () => {
  it('neither -> issue at binaryPath', () => {
    expectIssue(issuesFor('bare-metal', { labelSets: [{ labels: ['x'] }] }), {
      path: at('labelSets[0].binaryPath'),
      message: 'binaryPath (the agent executable) or image',
    });
  });
  it.each([
    ['binaryPath', { binaryPath: '/a' }],
    ['image', { image: 'img' }],
    ['both', { binaryPath: '/a', image: 'img' }],
  ])('%s alone is enough', (_n, set) => {
    expect(issuesFor('bare-metal', { labelSets: [{ labels: ['x'], ...set }] })).toEqual([]);
  });
});

describe('rule 3b: unsafe batch-file paths on a Windows host', () => {
  it.each([
    ['C:\\kici\\agent & evil.cmd', true],
    ['C:\\kici\\agent(1).bat', true],
    ['C:\\kici\\100%.cmd', true],
    ['C:\\kici\\a!b.CMD', true],
    ['C:\\kici\\a;b.bat', true],
    ['C:\\Program Files\\kici\\agent.cmd', false],
    ['C:\\kici\\agent.exe', false],
    ['C:\\kici\\a&b.exe', false],
    ['/opt/agent.sh', false],
  ])('%s unsafe=%s', (path, unsafe) => expect(isUnsafeBatchPath(path)).toBe(unsafe));

  const entry = { labelSets: [{ labels: ['x'], binaryPath: 'C:\\kici\\agent & evil.cmd' }] };
  it('is refused when the host is Windows', () => {
    expectIssue(issuesFor('bare-metal', entry, 'win32'), {
      path: at('labelSets[0].binaryPath'),
      message: 'cmd.exe would run as syntax',
    });
  });
  it('is not checked on other hosts', () => {
    expect(issuesFor('bare-metal', entry, 'linux')).toEqual([]);
  });
  it('a safe batch path passes on Windows', () => {
    expect(
      issuesFor('bare-metal', { labelSets: [{ labels: ['x'], binaryPath: 'C:\\kici\\agent.cmd' }] }, 'win32'),
    ).toEqual([]);
  });
});

describe('rule 4: plain platform labels need platform', () => {
  it.each(['windows', 'win32', 'macOS', 'darwin', 'arm64', 'aarch64', 'arm'])(
    '%s without platform is refused',
    (word) => {
      expectIssue(issuesFor('bare-metal', { labelSets: [{ labels: ['x', word], binaryPath: '/a' }] }), {
        path: at('labelSets[0].labels'),
        message: `label "${word.toLowerCase()}" names a platform; declare platform: { os, arch } instead`,
      });
    },
  );
  it('is accepted with platform declared', () => {
    const patch = {
      platform: { os: 'macos', arch: 'arm64' },
      labelSets: [{ labels: ['macos', 'arm64'], binaryPath: '/a' }],
    };
    expect(issuesFor('bare-metal', patch)).toEqual([]);
  });
});

describe('rule 5: every gate label is reachable', () => {
  it('mandatory label missing from a set is refused at that set', () => {
    const issues = issuesFor('container', {
      mandatoryLabels: ['GPU'],
      labelSets: [
        { labels: ['gpu', 'linux'], image: 'i' },
        { labels: ['linux'], image: 'i' },
      ],
    });
    expectIssue(issues, {
      path: at('labelSets[1].labels'),
      message: 'mandatory label "gpu" is missing from this label set',
    });
    expect(issues).toHaveLength(1);
  });
  it('label-set labels are compared case-insensitively', () => {
    expect(
      issuesFor('container', { mandatoryLabels: ['gpu'], labelSets: [{ labels: ['GPU '], image: 'i' }] }),
    ).toEqual([]);
  });
  it('platform taints are always reachable (they are injected)', () => {
    const patch = {
      platform: { os: 'windows', arch: 'arm64' },
      mandatoryLabels: ['windows'],
      labelSets: [{ labels: ['x'], image: 'i' }],
    };
    expect(issuesFor('container', patch)).toEqual([]);
  });
  it('parsed gate and labels stay as declared', () => {
    const out = parsedOk(
      fileWith({
        ...minimalEntry('event'),
        mandatoryLabels: ['gpu'],
        labelSets: [{ labels: ['gpu', 'linux'] }],
      }),
    );
    expect(out.scalers[0]!.mandatoryLabels).toEqual(['gpu']);
  });
});

describe('rule 6: firecracker requirements', () => {
  it.each(['firecrackerPath', 'jailerPath', 'kernelPath', 'uid', 'gid'])('%s is required', (field) => {
    expectIssue(issuesFor('firecracker', { [field]: undefined }), {
      path: at(field),
      message: `firecracker scalers need ${field}`,
    });
  });
  it('each missing field is its own issue', () => {
    const entry = {
      name: 'fc',
      type: 'firecracker',
      maxAgents: 1,
      labelSets: [{ labels: ['vm'], rootfsPath: '/r' }],
    };
    expect(issuesOf(fileWith(entry)).map((i) => i.path)).toEqual(
      ['firecrackerPath', 'jailerPath', 'kernelPath', 'uid', 'gid'].map(at),
    );
  });
  it('every label set needs rootfsPath', () => {
    expectIssue(issuesFor('firecracker', { labelSets: [{ labels: ['vm'] }] }), {
      path: at('labelSets[0].rootfsPath'),
      message: 'rootfsPath in every label set',
    });
  });
  it.each([['nope'], ['host:'], [':1.2.3.4'], ['h:not-an-ip']])('extraHosts %s is refused', (entry) => {
    expectIssue(issuesFor('firecracker', { extraHosts: ['ok:host-gateway', entry] }), {
      path: at('extraHosts[1]'),
      message: 'is not host:address',
    });
  });
  it('extraHosts are only parsed for firecracker', () => {
    expect(issuesFor('container', { extraHosts: ['whatever'] })).toEqual([]);
  });
});

describe('rules collect every issue', () => {
  it('reports field errors and rule errors of several entries in one pass', () => {
    const issues = issuesOf(
      fileWith(
        { name: 'a', type: 'container', maxAgents: 0, labelSets: [{ labels: ['x'] }] },
        {
          name: 'b',
          type: 'event',
          maxAgents: 1,
          mandatoryLabels: ['gpu'],
          labelSets: [{ labels: ['macos'] }],
        },
      ),
    );
    expectIssue(issues, { path: 'scalers[0].maxAgents', message: 'greater than 0' });
    expectIssue(issues, { path: 'scalers[0].labelSets[0].image', message: 'agent image' });
    expectIssue(issues, { path: 'scalers[1].provisioningTargets', message: 'provisioning target' });
    expectIssue(issues, { path: 'scalers[1].labelSets[0].labels', message: 'names a platform' });
    expectIssue(issues, { path: 'scalers[1].labelSets[0].labels', message: 'mandatory label "gpu"' });
  });
  it('rules tolerate garbage in the fields they read', () => {
    const issues = issuesOf(
      fileWith({
        name: 'a',
        type: 'firecracker',
        maxAgents: 1,
        labelSets: 'x',
        mandatoryLabels: 7,
        platform: 'linux',
        extraHosts: [1],
      }),
    );
    expect(issues.length).toBeGreaterThan(0);
  });
});
