import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { checkRunFile, summarizeRun } from '../../../src/jobs/run-file.js';

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kici-run-errors-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function problemsOf(lines: string[], name = 'run.yaml'): Promise<{ path: string; problems: string[] }> {
  const path = join(dir, name);
  await writeFile(path, lines.join('\n') + '\n');
  const res = await checkRunFile(path);
  if (res.ok) throw new Error('expected problems');
  return { path, problems: res.problems };
}

describe('run-file problems read like config problems', () => {
  it('a mistyped key names the file, the YAML path, "did you mean" and its line', async () => {
    const { path, problems } = await problemsOf([
      'jobs:',
      '  build:',
      '    runson: [linux, small]',
      '    steps:',
      '      - run: make',
    ]);
    // One line: "runsOn is required" would only repeat the suggestion.
    expect(problems).toEqual([`${path}: jobs.build: unknown key "runson" (did you mean "runsOn"?) (line 3)`]);
  });

  it('a mistyped step key points at the step line', async () => {
    const { path, problems } = await problemsOf([
      'jobs:',
      '  build:',
      '    runsOn: linux',
      '    steps:',
      '      - run: make',
      '      - run: make test',
      '        timeoutSecond: 60',
    ]);
    expect(problems).toEqual([
      `${path}: jobs.build.steps[1]: unknown key "timeoutSecond" (did you mean "timeoutSeconds"?) (line 7)`,
    ]);
  });

  it('a wrong type says what was expected and what was found, on its line', async () => {
    const { path, problems } = await problemsOf([
      'jobs:',
      '  build:',
      '    runsOn: linux',
      '    timeoutSeconds: "10m"',
      '    steps:',
      '      - run: make',
    ]);
    expect(problems).toEqual([
      `${path}: jobs.build.timeoutSeconds: expected a number, got the string "10m" (line 4)`,
    ]);
  });

  it('a missing field says what form it takes', async () => {
    const { path, problems } = await problemsOf(['jobs:', '  build:', '    steps:', '      - run: make']);
    expect(problems).toEqual([
      `${path}: jobs.build.runsOn: required: a label or a list of labels, like [linux, small] (line 3)`,
    ]);
  });

  it('lists every problem at once, each at its own line', async () => {
    const { path, problems } = await problemsOf([
      'name: nightly',
      'jobs:',
      '  a:',
      '    runsOn: linux',
      '    role: boss',
      '    steps:',
      '      - name: empty',
      '        run: ""',
      '  b:',
      '    runsOn: [linux]',
      '    steps: []',
      '    excludeLabels: slow',
    ]);
    expect(problems.sort()).toEqual(
      [
        `${path}: jobs.a.role: expected one of "execution", "build", "init", got the string "boss" (line 5)`,
        `${path}: jobs.a.steps[0].run: a shell command (line 8)`,
        `${path}: jobs.b.steps: at least one step (line 11)`,
        `${path}: jobs.b.excludeLabels: expected a list, got the string "slow" (line 12)`,
      ].sort(),
    );
  });

  it('resources and timeouts over their limits say the limit', async () => {
    const { path, problems } = await problemsOf([
      'jobs:',
      '  a:',
      '    runsOn: linux',
      '    timeoutSeconds: 9999999',
      '    resources:',
      '      limits: { memory: 4Gi }',
      '    steps: [{ run: make }]',
    ]);
    expect(problems.sort()).toEqual(
      [
        `${path}: jobs.a.timeoutSeconds: at most 2592000 (30 days) (line 4)`,
        `${path}: jobs.a.resources.limits.memory: a memory size like "512m", "2g" or "1024k" (binary units) (line 6)`,
      ].sort(),
    );
  });

  it('JSON run files get line numbers too', async () => {
    const { path, problems } = await problemsOf(
      ['{', '  "jobs": {', '    "a": {', '      "runsOn": "linux",', '      "step": []', '    }', '  }', '}'],
      'run.json',
    );
    expect(problems).toEqual([`${path}: jobs.a: unknown key "step" (did you mean "steps"?) (line 5)`]);
  });

  it('an unknown key with no near match lists what is allowed', async () => {
    const { problems } = await problemsOf([
      'jobs:',
      '  a:',
      '    runsOn: x',
      '    steps: [{run: y}]',
      '    zzz: 1',
    ]);
    expect(problems).toHaveLength(1);
    expect(problems[0]).toMatch(
      /jobs\.a: unknown key "zzz"; allowed here: runsOn, steps, env, .* \(line 5\)$/,
    );
  });

  it('a syntax error is one line with line and column', async () => {
    const { path, problems } = await problemsOf(['jobs:', '  a:', '    runsOn: [linux']);
    expect(problems).toHaveLength(1);
    expect(problems[0]).toMatch(
      new RegExp(`^${path.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}:\\d+:\\d+: not valid YAML`),
    );
  });

  it('a valid file is summarised as jobs and steps', async () => {
    const path = join(dir, 'ok.yaml');
    await writeFile(
      path,
      'jobs:\n  a: {runsOn: x, steps: [{run: a}, {run: b}]}\n  b: {runsOn: x, steps: [{run: c}]}\n',
    );
    const res = await checkRunFile(path);
    expect(res.ok).toBe(true);
    if (res.ok) expect(summarizeRun(res.spec)).toEqual({ jobs: 2, steps: 3 });
  });
});
