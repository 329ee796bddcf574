import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Command, CommanderError } from 'commander';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { registerScalerConfigCommands } from '../../../src/cli/admin/scaler-config-commands.js';
import { tempDir } from './fixtures.js';

const example = fileURLToPath(new URL('../../../examples/scalers.yaml', import.meta.url));

let dir: string;
let cleanup: () => Promise<void>;
beforeEach(async () => ({ dir, cleanup } = await tempDir()));
afterEach(async () => {
  process.exitCode = undefined;
  vi.restoreAllMocks();
  await cleanup();
});

interface Run {
  out: string;
  err: string;
  exitCode: number | string | undefined;
  error?: unknown;
}

/** A kici-admin-like program: root -> scaler -> (our commands), run in-process. */
async function run(args: string[], opts: { exitOverride?: boolean } = {}): Promise<Run> {
  let out = '';
  let err = '';
  const root = new Command('kici-admin');
  root.configureOutput({ writeOut: (s) => (out += s), writeErr: (s) => (err += s) });
  if (opts.exitOverride !== false) root.exitOverride();
  const scaler = root.command('scaler');
  registerScalerConfigCommands(scaler, { out: (s) => (out += s), err: (s) => (err += s) });
  process.exitCode = undefined;
  let error: unknown;
  try {
    await root.parseAsync(args, { from: 'user' });
  } catch (e) {
    error = e;
  }
  return { out, err, exitCode: process.exitCode, error };
}

async function write(rel: string, text: string): Promise<string> {
  const path = join(dir, rel);
  await mkdir(join(path, '..'), { recursive: true });
  await writeFile(path, text);
  return path;
}

describe('kici-admin scaler validate', () => {
  it('exits 0 with a summary for a valid file', async () => {
    const r = await run(['scaler', 'validate', example, '--config-only']);
    expect(r.exitCode).toBe(0);
    expect(r.out).toContain(`${example}: valid`);
    expect(r.out).toContain(
      '5 scaler(s) (1 container, 2 bare-metal, 1 firecracker, 1 event), 8 label set(s)',
    );
    expect(r.out).toContain('globalResourceCap: 32 cpu, 64 GiB');
    expect(r.err).toBe('');
  });

  it('exits 1 and lists every problem, without a stack trace', async () => {
    const main = await write(
      's.yaml',
      'version: 2\nglobalMaxAgents: 0\nscalers:\n  - name: a\n    type: docker\n',
    );
    const r = await run(['scaler', 'validate', main]);
    expect(r.exitCode).toBe(1);
    expect(r.out).toContain(`${main}: invalid, 5 problems:`);
    for (const fragment of [
      'version: must be 1',
      'globalMaxAgents: must be greater than 0',
      'scalers[0].type: type "docker" was renamed',
      'scalers[0].maxAgents: required',
      'scalers[0].labelSets: required',
    ]) {
      expect(r.out).toContain(fragment);
    }
    expect(r.out + r.err).not.toMatch(/\n\s+at /);
  });

  it('merges --dir and names the drop-in in problems', async () => {
    const main = await write('s.yaml', 'version: 1\nscalers: []\n');
    const d = await write(
      'd/x.yaml',
      'scalers:\n  - name: a\n    type: container\n    maxAgents: 1\n    labelSets: [{ labels: [a] }]\n',
    );
    const r = await run(['scaler', 'validate', main, '--dir', join(dir, 'd')]);
    expect(r.exitCode).toBe(1);
    expect(r.out).toContain(
      `${d}: scalers[0].labelSets[0].image: container scalers need an agent image (required)`,
    );
  });

  it('missing file -> exit 1, "<path>: file not found"', async () => {
    const r = await run(['scaler', 'validate', join(dir, 'none.yaml')]);
    expect(r.exitCode).toBe(1);
    expect(r.out).toContain(`${join(dir, 'none.yaml')}: file not found`);
  });

  it('--json prints a machine-readable result for both outcomes', async () => {
    const ok = await run(['scaler', 'validate', example, '--json', '--config-only']);
    expect(ok.exitCode).toBe(0);
    const body = JSON.parse(ok.out);
    expect(body).toMatchObject({ ok: true, config: example, warnings: [] });
    expect(body.summary.totals.scalers).toBe(5);

    const main = await write('bad.yaml', 'version: 1\n');
    const bad = await run(['scaler', 'validate', main, '--json']);
    expect(bad.exitCode).toBe(1);
    expect(JSON.parse(bad.out)).toEqual({
      ok: false,
      config: main,
      dir: null,
      problems: [`${main}: scalers: required: expected a list`],
    });
  });

  it('prints warnings after the summary and still exits 0', async () => {
    const main = await write('s.yaml', 'version: 1\nscalerz: []\nscalers: []\n');
    const r = await run(['scaler', 'validate', main]);
    expect(r.exitCode).toBe(0);
    expect(r.out).toContain('warning: ');
    expect(r.out).toContain('unknown key "scalerz"');
  });

  it.each([
    ['missing argument', ['scaler', 'validate']],
    ['unknown option', ['scaler', 'validate', 'x.yaml', '--bogus']],
    ['too many arguments', ['scaler', 'validate', 'a.yaml', 'b.yaml']],
    ['--dir without a value', ['scaler', 'validate', 'a.yaml', '--dir']],
  ])('usage error (%s) exits 2 through the program exitOverride', async (_n, args) => {
    const r = await run(args);
    expect(r.exitCode).toBe(2);
    expect(r.error).toBeInstanceOf(CommanderError);
    expect((r.error as CommanderError).exitCode).toBe(2);
    expect(r.err).toMatch(/error:/);
  });

  it('usage error exits 2 via process.exit when the program has no exitOverride', async () => {
    const exit = vi.spyOn(process, 'exit').mockImplementation(((code?: number) => {
      throw new Error(`exit ${code}`);
    }) as typeof process.exit);
    const r = await run(['scaler', 'validate'], { exitOverride: false });
    expect(exit).toHaveBeenCalledWith(2);
    expect(r.exitCode).toBe(2);
  });

  it('--help is not a usage error', async () => {
    const r = await run(['scaler', 'validate', '--help']);
    expect(r.exitCode).toBe(0);
    expect(r.out).toContain('--dir <scalers.d>');
  });
});

describe('kici-admin scaler schema', () => {
  it('prints the JSON Schema of the input side', async () => {
    const r = await run(['scaler', 'schema']);
    expect(r.exitCode).toBe(0);
    const schema = JSON.parse(r.out);
    expect(schema.$schema).toBe('http://json-schema.org/draft-07/schema#');
    expect(schema.properties.scalers.items.properties.type.enum).toContain('firecracker');
  });

  it('refuses arguments with exit 2', async () => {
    const r = await run(['scaler', 'schema', 'extra']);
    expect(r.exitCode).toBe(2);
  });
});
