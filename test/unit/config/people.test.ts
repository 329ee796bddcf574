import { execFileSync } from 'node:child_process';
import { chmod, mkdir, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { loadScalerConfigForPeople, type PeopleLoadResult } from '../../../src/config/index.js';
import { tempDir } from './fixtures.js';

let dir: string;
let cleanup: () => Promise<void>;
beforeEach(async () => ({ dir, cleanup } = await tempDir()));
afterEach(async () => cleanup());

async function write(rel: string, text: string): Promise<string> {
  const path = join(dir, rel);
  await mkdir(join(path, '..'), { recursive: true });
  await writeFile(path, text);
  return path;
}

const event = (name: string, labels: string) =>
  `  - name: ${name}\n    type: event\n    maxAgents: 1\n    provisioningTargets: ["job:p.yaml"]\n    labelSets: [{ labels: [${labels}] }]\n`;

function problems(r: PeopleLoadResult): string[] {
  if (r.ok) throw new Error('expected problems');
  return r.problems;
}

describe('loadScalerConfigForPeople', () => {
  it('returns the config and no warnings for a clean file', async () => {
    const main = await write('s.yaml', `version: 1\nscalers:\n${event('a', 'x')}`);
    const r = await loadScalerConfigForPeople(main);
    expect(r).toMatchObject({ ok: true, warnings: [] });
  });

  it('missing file -> "<path>: file not found"', async () => {
    const path = join(dir, 'missing.yaml');
    expect(problems(await loadScalerConfigForPeople(path))).toEqual([`${path}: file not found`]);
  });

  it('missing directory -> "<dir>: directory not found"', async () => {
    const main = await write('s.yaml', 'version: 1\nscalers: []\n');
    const d = join(dir, 'nope.d');
    expect(problems(await loadScalerConfigForPeople(main, d))).toEqual([`${d}: directory not found`]);
  });

  it('a file as the directory -> not a directory', async () => {
    const main = await write('s.yaml', 'version: 1\nscalers: []\n');
    expect(problems(await loadScalerConfigForPeople(main, main))).toEqual([`${main}: not a directory`]);
  });

  it('a directory as the config -> is a directory', async () => {
    expect(problems(await loadScalerConfigForPeople(dir))).toEqual([
      `${dir}: is a directory, expected a YAML file`,
    ]);
  });

  it('an unreadable file -> permission denied', async () => {
    const main = await write('s.yaml', 'version: 1\nscalers: []\n');
    await chmod(main, 0);
    if (process.getuid?.() !== 0) {
      expect(problems(await loadScalerConfigForPeople(main))).toEqual([`${main}: permission denied`]);
      return;
    }
    // Root reads anything: check from an unprivileged process instead (setpriv ships with util-linux).
    const root = resolve(import.meta.dirname, '../../..');
    const script = `import(${JSON.stringify(join(root, 'dist/config/index.js'))}).then(async (m) => console.log(JSON.stringify(await m.loadScalerConfigForPeople(${JSON.stringify(main)}))))`;
    const out = execFileSync(
      'setpriv',
      [
        '--reuid=65534',
        '--regid=65534',
        '--clear-groups',
        join(root, 'node_modules/.bin/node'),
        '-e',
        script,
      ],
      { encoding: 'utf8' },
    );
    expect(JSON.parse(out)).toEqual({ ok: false, problems: [`${main}: permission denied`] });
  });

  it('reports YAML errors of every file with line and column', async () => {
    const main = await write('s.yaml', 'version: 1\nscalers: [\n');
    const d1 = await write('d/a.yaml', 'scalers:\n  - name: x\n   bad: indent\n');
    const d2 = await write('d/b.yaml', '- 1\n');
    const lines = problems(await loadScalerConfigForPeople(main, join(dir, 'd')));
    expect(lines.some((l) => l.startsWith(`${main}: line `) && l.includes('invalid YAML'))).toBe(true);
    expect(lines.some((l) => l.startsWith(`${d1}: line 3, column`))).toBe(true);
    expect(lines).toContain(
      `${d2}: the top level of a scalers.d file must be a mapping with a "scalers" list, got a list`,
    );
  });

  it('shows the first YAML error of a file and counts the echoes after it', async () => {
    const main = await write('s.yaml', 'version: 1\nscalers:\n  - name: [a\n    type: x: y\n  bad\n');
    const lines = problems(await loadScalerConfigForPeople(main));
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(
      new RegExp(
        `^${main}: line \\d+, column \\d+: invalid YAML: .+ \\(and \\d+ more YAML errors? after it, often caused by this one\\)$`,
      ),
    );
  });

  it('makes invisible characters in unknown keys visible', async () => {
    const main = await write(
      's.yaml',
      'version: 1\nscalers:\n  - name: a\n    type: event\n    maxAgents: 1\n    provisioningTargets: ["job:p"]\n    labelSets: [{ "labe\uFEFFls": [x] }]\n',
    );
    expect(problems(await loadScalerConfigForPeople(main))).toContain(
      `${main}: scalers[0].labelSets[0]: unknown key "labe\\ufeffls" (did you mean "labels"?) (line 7)`,
    );
  });

  it('lists every schema problem, naming the drop-in and its own index', async () => {
    const main = await write('s.yaml', `version: 1\nglobalMaxAgents: -1\nscalers:\n${event('a', 'a')}`);
    const d = await write(
      'scalers.d/20-more.yaml',
      `scalers:\n${event('b', 'b')}  - name: c\n    type: container\n    maxAgents: 1\n    labelSets: [{ labels: [c] }]\n`,
    );
    expect(problems(await loadScalerConfigForPeople(main, join(dir, 'scalers.d')))).toEqual([
      `${main}: globalMaxAgents: must be greater than 0, got number -1 (line 2)`,
      `${d}: scalers[1].labelSets[0].image: container scalers need an agent image (required) (line 10)`,
    ]);
  });

  it('reports label-set overlaps naming both scalers, at the later declaration', async () => {
    const main = await write('s.yaml', `version: 1\nscalers:\n${event('a', 'Linux, docker')}`);
    const d = await write('d/x.yaml', `scalers:\n${event('z', 'x')}${event('b', 'docker, linux')}`);
    expect(problems(await loadScalerConfigForPeople(main, join(dir, 'd')))).toEqual([
      `${d}: scalers[1].labelSets[0].labels: Label set [docker,linux] overlaps between scalers "a" and "b" (line 11)`,
    ]);
  });

  it('allows the same label set twice inside one scaler', async () => {
    const main = await write(
      's.yaml',
      'version: 1\nscalers:\n  - name: a\n    type: event\n    maxAgents: 1\n    provisioningTargets: ["job:p"]\n    labelSets: [{ labels: [x] }, { labels: [X] }]\n',
    );
    expect((await loadScalerConfigForPeople(main)).ok).toBe(true);
  });

  it('reports duplicate scaler names across files', async () => {
    const main = await write('s.yaml', `version: 1\nscalers:\n${event('a', 'x')}`);
    const d = await write('d/x.yaml', `scalers:\n${event('a', 'y')}`);
    expect(problems(await loadScalerConfigForPeople(main, join(dir, 'd')))).toEqual([
      `${d}: scalers[0].name: duplicate scaler name "a" (first defined at ${main}: scalers[0]) (line 2)`,
    ]);
  });

  it('reports cross-scaler problems together with schema problems', async () => {
    const main = await write(
      's.yaml',
      `version: 1\nglobalMaxAgents: 0\nscalers:\n${event('a', 'x')}${event('a', 'x')}`,
    );
    const lines = problems(await loadScalerConfigForPeople(main));
    expect(lines).toHaveLength(2);
    expect(lines[0]).toContain('globalMaxAgents');
    expect(lines[1]).toContain('duplicate scaler name "a"');
  });

  it('applies the Windows batch-file rule only for a Windows host', async () => {
    const main = await write(
      's.yaml',
      'version: 1\nscalers:\n  - name: w\n    type: bare-metal\n    maxAgents: 1\n    platform: { os: windows, arch: x64 }\n    labelSets: [{ labels: [windows], binaryPath: "C:\\\\a&b.cmd" }]\n',
    );
    expect((await loadScalerConfigForPeople(main, undefined, { hostPlatform: 'linux' })).ok).toBe(true);
    expect(
      problems(await loadScalerConfigForPeople(main, undefined, { hostPlatform: 'win32' }))[0],
    ).toContain('scalers[0].labelSets[0].binaryPath: batch-file path');
  });
});

describe('warnings', () => {
  async function warningsOf(mainText: string, dropIns: Record<string, string> = {}): Promise<string[]> {
    const main = await write('s.yaml', mainText);
    for (const [name, text] of Object.entries(dropIns)) await write(`d/${name}`, text);
    const r = await loadScalerConfigForPeople(
      main,
      Object.keys(dropIns).length > 0 ? join(dir, 'd') : undefined,
    );
    if (!r.ok) throw new Error(r.problems.join('\n'));
    return r.warnings;
  }

  const container = (extra = '', setExtra = '') =>
    `  - name: c\n    type: container\n    maxAgents: 2\n${extra}    labelSets:\n      - labels: [c]\n        image: img\n${setExtra}`;

  it.each<[string, string, string]>([
    [
      'unknown top-level key',
      `version: 1\nglobalMaxAgent: 3\nscalers: []\n`,
      'globalMaxAgent: unknown key "globalMaxAgent" in the top level is ignored (did you mean "globalMaxAgents"?)',
    ],
    [
      'unknown key under defaults',
      `version: 1\ndefaults: { resource: {} }\nscalers: []\n`,
      'defaults.resource: unknown key "resource" in defaults is ignored',
    ],
    [
      'unknown key under firecracker',
      `version: 1\nfirecracker: { bridge: br0 }\nscalers: []\n`,
      'firecracker.bridge: unknown key "bridge"',
    ],
    [
      'field for another type',
      `version: 1\nscalers:\n${container('    enforceCgroups: true\n')}`,
      'scalers[0].enforceCgroups: ignored by container scalers (used by bare-metal)',
    ],
    [
      'label-set field for another type',
      `version: 1\nscalers:\n${container('', '        rootfsPath: /r\n')}`,
      'scalers[0].labelSets[0].rootfsPath: ignored by container scalers',
    ],
    [
      'network isolation off',
      `version: 1\nscalers:\n${container('    networkIsolation: false\n')}`,
      'scalers[0].networkIsolation: agents of this scaler can reach private networks',
    ],
    [
      'container socket',
      `version: 1\nscalers:\n${container('', '        containerSocket: true\n')}`,
      'scalers[0].labelSets[0].containerSocket: mounting the runtime socket',
    ],
    [
      'network policy key typo',
      `version: 1\nscalers:\n${container('', '        networkPolicy: { denyall: true }\n')}`,
      'networkPolicy.denyall: unknown key "denyall" in networkPolicy is ignored (did you mean "denyAll"?)',
    ],
    [
      'warm pool size 0',
      `version: 1\nscalers:\n${container('    warmPool: { enabled: true }\n')}`,
      'scalers[0].warmPool: enabled with size 0',
    ],
    [
      'warm pool larger than maxAgents',
      `version: 1\nscalers:\n${container('    warmPool: { enabled: true, size: 5 }\n', '        resources: { limits: { cpus: 1 } }\n')}`,
      'scalers[0].warmPool.size: is larger than maxAgents (2)',
    ],
    [
      'warm pool without resources',
      `version: 1\nscalers:\n${container('    warmPool: { enabled: true, size: 1 }\n')}`,
      'scalers[0].labelSets[0].resources: the warm pool skips this label set',
    ],
    ['unresolved YAML tag', `version: 1\nscalers: !weird []\n`, 'Unresolved tag: !weird'],
  ])('%s', async (_n, text, fragment) => {
    const warnings = await warningsOf(text);
    expect(warnings.some((w) => w.includes(fragment) && w.startsWith(join(dir, 's.yaml')))).toBe(true);
  });

  it('warm pool with defaults.resources is not warned about', async () => {
    const text = `version: 1\ndefaults: { resources: { limits: { cpus: 1 } } }\nscalers:\n${container('    warmPool: { enabled: true, size: 1 }\n')}`;
    expect(await warningsOf(text)).toEqual([]);
  });

  it('drop-in keys other than scalers, and drop-ins without scalers', async () => {
    const warnings = await warningsOf('version: 1\nscalers: []\n', {
      'a.yaml': 'version: 1\nscalers: []\n',
      'b.yaml': 'foo: 1\n',
      'c.yaml': '',
    });
    expect(warnings).toEqual([
      `${join(dir, 'd/a.yaml')}: version: ignored in a scalers.d file; only "scalers" is merged`,
      `${join(dir, 'd/b.yaml')}: contributes no scalers (it has no "scalers" list)`,
      `${join(dir, 'd/b.yaml')}: foo: ignored in a scalers.d file; only "scalers" is merged`,
      `${join(dir, 'd/c.yaml')}: contributes no scalers (it has no "scalers" list)`,
    ]);
  });
});
