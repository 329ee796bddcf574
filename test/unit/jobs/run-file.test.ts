import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { readRunFile } from '../../../src/jobs/run-file.js';
import { UserError } from '../../../src/util/errors.js';

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kici-run-file-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function file(name: string, text: string): Promise<string> {
  const path = join(dir, name);
  await writeFile(path, text);
  return path;
}

async function failure(path: string): Promise<UserError> {
  const err = await readRunFile(path).then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(UserError);
  return err as UserError;
}

describe('readRunFile', () => {
  it('reads a YAML run file', async () => {
    const path = await file(
      'run.yaml',
      [
        'name: nightly',
        'jobs:',
        '  build:',
        '    runsOn: [linux, bm]',
        '    steps:',
        '      - run: make',
        '',
      ].join('\n'),
    );
    const spec = await readRunFile(path);
    expect(spec).toEqual({
      name: 'nightly',
      jobs: { build: { runsOn: ['linux', 'bm'], steps: [{ run: 'make' }], role: 'execution' } },
    });
  });

  it('reads the same run written as JSON', async () => {
    const path = await file(
      'run.json',
      JSON.stringify({ jobs: { t: { runsOn: 'linux', steps: [{ run: 'npm test' }] } } }),
    );
    expect((await readRunFile(path)).jobs.t!.runsOn).toEqual(['linux']);
  });

  it('says a missing file is missing, naming it', async () => {
    const path = join(dir, 'nope.yaml');
    const err = await failure(path);
    expect(err.message).toBe(`${path}: file not found`);
  });

  it('names the file when it cannot be read for another reason', async () => {
    const sub = join(dir, 'a-directory.yaml');
    await mkdir(sub);
    const err = await failure(sub);
    expect(err.message).toMatch(
      new RegExp(`^${sub.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}: cannot read \\(EISDIR\\)`),
    );
  });

  it.each([
    { what: 'an unclosed flow list', text: 'jobs:\n  build:\n    runsOn: [linux\n', line: 4 },
    { what: 'a duplicate key', text: 'jobs:\n  a: {}\n  a: {}\n', line: 3 },
    { what: 'bad indentation', text: 'jobs:\n  a:\n    runsOn: x\n   steps: []\n', line: 4 },
    { what: 'two documents', text: 'jobs: {}\n---\njobs: {}\n', line: 2 },
  ])('reports $what with file:line:col', async ({ text, line }) => {
    const path = await file('bad.yaml', text);
    const err = await failure(path);
    const m = /^(.*):(\d+):(\d+): not valid YAML or JSON: (.+)$/.exec(err.message);
    expect(m, err.message).not.toBeNull();
    expect(m![1]).toBe(path);
    expect(Number(m![2])).toBe(line);
    expect(Number(m![3])).toBeGreaterThanOrEqual(1);
    // Only the first line of the parser's message, not its code excerpt.
    expect(err.message).not.toContain('\n');
  });

  it('lists every spec problem with the file and the path inside it', async () => {
    const path = await file(
      'run.yaml',
      ['jobs:', '  build:', '    runsOn: []', '    steps:', '      - run: ""', '    role: boss', ''].join(
        '\n',
      ),
    );
    const err = await failure(path);
    const byPath = err.problems.map((p) => {
      expect(p.startsWith(`${path}: `)).toBe(true);
      return p.slice(path.length + 2).split(': ')[0];
    });
    expect(byPath.sort()).toEqual(['jobs.build.role', 'jobs.build.runsOn', 'jobs.build.steps[0].run']);
    expect(err.problems).toContain(`${path}: jobs.build.steps[0].run: a shell command (line 5)`);
    expect(err.message.startsWith('invalid run file:\n')).toBe(true);
    for (const p of err.problems) expect(err.message).toContain(p);
  });

  it('refuses an empty file as a run without jobs, naming the file', async () => {
    const path = await file('empty.yaml', '');
    const err = await failure(path);
    expect(err.problems).toHaveLength(1);
    expect(err.problems[0]).toMatch(
      new RegExp(`^${path.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}: \\(top level\\): expected a mapping`),
    );
  });
});
