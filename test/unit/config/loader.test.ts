import { mkdir, symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { YAMLParseError } from 'yaml';
import { ZodError } from 'zod';
import { formatConfigError, loadScalerConfig, readConfigSources } from '../../../src/config/index.js';
import { UserError } from '../../../src/util/errors.js';
import { tempDir } from './fixtures.js';

let dir: string;
let cleanup: () => Promise<void>;
beforeEach(async () => ({ dir, cleanup } = await tempDir()));
afterEach(async () => cleanup());

const scaler = (name: string, label = name) =>
  `  - name: ${name}\n    type: event\n    maxAgents: 1\n    provisioningTargets: ["job:p.yaml"]\n    labelSets: [{ labels: [${label}] }]\n`;

async function write(rel: string, text: string): Promise<string> {
  const path = join(dir, rel);
  await mkdir(join(path, '..'), { recursive: true });
  await writeFile(path, text);
  return path;
}

describe('loadScalerConfig', () => {
  it('loads and validates the main file', async () => {
    const main = await write('scalers.yaml', `version: 1\nscalers:\n${scaler('a')}`);
    const config = await loadScalerConfig(main);
    expect(config.scalers.map((s) => s.name)).toEqual(['a']);
    expect(config.globalMaxAgents).toBe(50);
  });

  it('appends drop-in scalers in code-unit file order, ignoring other keys and files', async () => {
    const main = await write('scalers.yaml', `version: 1\nglobalMaxAgents: 7\nscalers:\n${scaler('main')}`);
    await write('scalers.d/b.yml', `scalers:\n${scaler('b')}`);
    await write('scalers.d/B.yaml', `version: 99\nglobalMaxAgents: 1\nscalers:\n${scaler('upper-b')}`);
    await write('scalers.d/a.yaml', `scalers:\n${scaler('a1')}${scaler('a2')}`);
    await write('scalers.d/notes.txt', 'scalers: [1, 2, 3]');
    await write('scalers.d/x.yaml.bak', 'garbage: [');
    await write('scalers.d/empty.yaml', '');
    await write('scalers.d/no-scalers.yaml', 'foo: 1\n');
    await write('scalers.d/scalers-not-list.yaml', 'scalers: nope\n');
    await mkdir(join(dir, 'scalers.d', 'sub.yaml'));
    const config = await loadScalerConfig(main, join(dir, 'scalers.d'));
    // 'B' (0x42) sorts before 'a' (0x61): plain code-unit order, not locale order.
    expect(config.scalers.map((s) => s.name)).toEqual(['main', 'upper-b', 'a1', 'a2', 'b']);
    expect(config.version).toBe(1);
    expect(config.globalMaxAgents).toBe(7);
  });

  it('creates the scalers list when the main file has none', async () => {
    const main = await write('scalers.yaml', 'version: 1\n');
    await write('d/one.yaml', `scalers:\n${scaler('one')}`);
    expect((await loadScalerConfig(main, join(dir, 'd'))).scalers.map((s) => s.name)).toEqual(['one']);
  });

  it('follows symlinked drop-ins', async () => {
    const target = await write('elsewhere/shared.yaml', `scalers:\n${scaler('linked')}`);
    const main = await write('scalers.yaml', 'version: 1\nscalers: []\n');
    await mkdir(join(dir, 'd'));
    await symlink(target, join(dir, 'd', 'shared.yaml'));
    expect((await loadScalerConfig(main, join(dir, 'd'))).scalers.map((s) => s.name)).toEqual(['linked']);
  });

  it('throws a ZodError with every issue when validation fails', async () => {
    const main = await write('scalers.yaml', 'version: 2\nglobalMaxAgents: 0\nscalers: []\n');
    const err = await loadScalerConfig(main).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ZodError);
    expect((err as ZodError).issues.map((i) => i.path.join('.'))).toEqual(['version', 'globalMaxAgents']);
  });

  it('throws the YAML error for a syntax error', async () => {
    const main = await write('scalers.yaml', 'version: 1\nscalers: [\n');
    await expect(loadScalerConfig(main)).rejects.toBeInstanceOf(YAMLParseError);
  });

  it('throws the fs error for a missing file', async () => {
    await expect(loadScalerConfig(join(dir, 'nope.yaml'))).rejects.toMatchObject({ code: 'ENOENT' });
  });

  it('throws the fs error for a missing drop-in directory', async () => {
    const main = await write('scalers.yaml', 'version: 1\nscalers: []\n');
    await expect(loadScalerConfig(main, join(dir, 'missing.d'))).rejects.toMatchObject({ code: 'ENOENT' });
  });

  it.each([
    ['a list', '- name: x\n', 'got a list'],
    ['a scalar', 'just text\n', 'got a string'],
    ['a number', '42\n', 'got a number'],
  ])('refuses a drop-in whose top level is %s, naming the file', async (_n, text, kind) => {
    const main = await write('scalers.yaml', 'version: 1\nscalers: []\n');
    const bad = await write('d/bad.yaml', text);
    const err = await loadScalerConfig(main, join(dir, 'd')).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(UserError);
    expect((err as Error).message).toBe(
      `${bad}: the top level of a scalers.d file must be a mapping with a "scalers" list, ${kind}`,
    );
  });

  it('refuses an alias bomb instead of expanding it', async () => {
    const lines = ['a: &a [x, x, x, x, x, x, x, x, x]'];
    for (let i = 0; i < 12; i++)
      lines.push(
        `${String.fromCharCode(98 + i)}: &${String.fromCharCode(98 + i)} [*${String.fromCharCode(97 + i)}, *${String.fromCharCode(97 + i)}, *${String.fromCharCode(97 + i)}, *${String.fromCharCode(97 + i)}, *${String.fromCharCode(97 + i)}, *${String.fromCharCode(97 + i)}, *${String.fromCharCode(97 + i)}, *${String.fromCharCode(97 + i)}, *${String.fromCharCode(97 + i)}]`,
      );
    const main = await write('scalers.yaml', `version: 1\nscalers: []\n${lines.join('\n')}\n`);
    const err = await loadScalerConfig(main).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(UserError);
    expect((err as Error).message).toContain(main);
  });

  it('supports anchors and merge keys to share settings', async () => {
    const main = await write(
      'scalers.yaml',
      [
        'version: 1',
        'x-common: &common { type: container, maxAgents: 2 }',
        'scalers:',
        '  - <<: *common',
        '    name: a',
        '    labelSets: [{ labels: [a], image: img }]',
      ].join('\n'),
    );
    const config = await loadScalerConfig(main);
    expect(config.scalers[0]).toMatchObject({ name: 'a', type: 'container', maxAgents: 2 });
  });

  it('the thrown ZodError still names the drop-in file and its own index', async () => {
    const main = await write('scalers.yaml', `version: 1\nscalers:\n${scaler('m')}`);
    const dropIn = await write(
      'd/10-x.yaml',
      `scalers:\n${scaler('ok')}  - name: broken\n    type: container\n    maxAgents: 1\n    labelSets: [{ labels: [z] }]\n`,
    );
    const err = await loadScalerConfig(main, join(dir, 'd')).catch((e: unknown) => e);
    expect(formatConfigError(err, { configPath: main })).toEqual([
      `${dropIn}: scalers[1].labelSets[0].image: container scalers need an agent image (required) (line 10)`,
    ]);
  });
});

describe('readConfigSources', () => {
  it('records where each merged scaler came from', async () => {
    const main = await write('scalers.yaml', `version: 1\nscalers:\n${scaler('m0')}${scaler('m1')}`);
    const a = await write('d/a.yaml', `scalers:\n${scaler('a0')}`);
    const b = await write('d/b.yaml', `scalers:\n${scaler('b0')}${scaler('b1')}`);
    const sources = await readConfigSources(main, join(dir, 'd'));
    expect(sources.failures).toEqual([]);
    expect(sources.origins).toEqual([
      { file: main, localIndex: 0 },
      { file: main, localIndex: 1 },
      { file: a, localIndex: 0 },
      { file: b, localIndex: 0 },
      { file: b, localIndex: 1 },
    ]);
  });

  it('collects failures of every file instead of stopping at the first', async () => {
    const main = await write('scalers.yaml', 'version: [\n');
    await write('d/a.yaml', 'scalers: {\n');
    await write('d/b.yaml', '- x\n');
    const sources = await readConfigSources(main, join(dir, 'd'));
    expect(sources.failures).toHaveLength(3);
  });

  it('leaves each file value as written (merging works on copies)', async () => {
    const main = await write('scalers.yaml', `version: 1\nscalers:\n${scaler('m')}`);
    await write('d/a.yaml', `scalers:\n${scaler('a')}`);
    const sources = await readConfigSources(main, join(dir, 'd'));
    expect((sources.files[0]!.value as { scalers: unknown[] }).scalers).toHaveLength(1);
    expect((sources.merged as { scalers: unknown[] }).scalers).toHaveLength(2);
  });
});
