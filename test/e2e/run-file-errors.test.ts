import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  ADMIN_BIN,
  bareMetalConfig,
  runNode,
  startTestOrchestrator,
  type TestOrchestrator,
} from '../helpers/orchestrator.js';

/**
 * Run files: `kici-admin job validate` checks a run file offline, and `job submit` refuses a bad
 * one, both with the file, the YAML path, the line, "did you mean" and the expected form.
 */

let files: string;
const offline = (args: string[]) =>
  // No server at all: validate must not need one.
  runNode([ADMIN_BIN, ...args], { KICI_SERVER_URL: 'http://127.0.0.1:9', KICI_ADMIN_TOKEN: 'x' }).exited;

async function write(name: string, lines: string[]): Promise<string> {
  const path = join(files, name);
  await writeFile(path, lines.join('\n') + '\n');
  return path;
}

const BAD = [
  'name: nightly',
  'jobs:',
  '  build:',
  '    runson: [linux, small]',
  '    steps:',
  '      - name: compile',
  '        run: make',
  '        timeoutSeconds: 10m',
  '  test:',
  '    runsOn: linux',
  '    role: tester',
  '    steps: []',
];

beforeAll(async () => {
  files = await mkdtemp(join(tmpdir(), 'kici-run-errors-'));
});
afterAll(async () => {
  await rm(files, { recursive: true, force: true });
});

describe('job validate (offline)', () => {
  it('a valid file: exit 0 and a one-line summary of jobs and steps', async () => {
    const path = await write('ok.yaml', [
      'jobs:',
      '  build: { runsOn: [linux, small], steps: [{ run: make }, { run: make test }] }',
      '  lint: { runsOn: linux, steps: [{ run: npm run lint }] }',
    ]);
    const res = await offline(['job', 'validate', path]);
    expect(res.code).toBe(0);
    expect(res.stdout).toBe(`${path}: valid: 2 jobs, 3 steps\n`);
    const json = await offline(['job', 'validate', path, '--json']);
    expect(json.code).toBe(0);
    expect(JSON.parse(json.stdout)).toEqual({ ok: true, file: path, jobs: 2, steps: 3 });
  });

  it('an invalid file: exit 1 and every problem with file, path, line and the expected form', async () => {
    const path = await write('bad.yaml', BAD);
    const res = await offline(['job', 'validate', path]);
    expect(res.code).toBe(1);
    const want = [
      `${path}: jobs.build: unknown key "runson" (did you mean "runsOn"?) (line 4)`,
      `${path}: jobs.build.steps[0].timeoutSeconds: expected a number, got the string "10m" (line 8)`,
      `${path}: jobs.test.role: expected one of "execution", "build", "init", got the string "tester" (line 11)`,
      `${path}: jobs.test.steps: at least one step (line 12)`,
    ];
    expect(res.stdout.split('\n')[0]).toBe(`${path}: invalid, 4 problems:`);
    for (const w of want) expect(res.stdout).toContain(`  ${w}\n`);
    expect(res.stderr).toBe('');
    const json = await offline(['job', 'validate', path, '--json']);
    expect(json.code).toBe(1);
    const body = JSON.parse(json.stdout) as { ok: boolean; problems: string[] };
    expect(body.ok).toBe(false);
    expect([...body.problems].sort()).toEqual([...want].sort());
  });

  it('a syntax error and a missing file are one line each, exit 1', async () => {
    const path = await write('syntax.yaml', ['jobs:', '  build:', '    runsOn: [linux']);
    const res = await offline(['job', 'validate', path]);
    expect(res.code).toBe(1);
    expect(res.stdout).toMatch(
      new RegExp(`  ${path.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}:\\d+:\\d+: not valid YAML`),
    );
    const missing = await offline(['job', 'validate', join(files, 'nope.yaml'), '--json']);
    expect(missing.code).toBe(1);
    expect(JSON.parse(missing.stdout)).toMatchObject({
      ok: false,
      problems: [`${join(files, 'nope.yaml')}: file not found`],
    });
  });
});

describe('job submit refuses a bad run file the same way', () => {
  let t: TestOrchestrator;
  beforeAll(async () => {
    t = await startTestOrchestrator({ config: bareMetalConfig() });
  });
  afterAll(async () => {
    await t?.stop();
  });

  it('lists every problem on stderr (with --json: as JSON on stdout), exit 1, nothing submitted', async () => {
    const path = await write('bad-submit.yaml', BAD);
    const env = { KICI_SERVER_URL: t.orch.url, KICI_ADMIN_TOKEN: t.orch.adminToken };
    const want = [
      `${path}: jobs.build: unknown key "runson" (did you mean "runsOn"?) (line 4)`,
      `${path}: jobs.test.steps: at least one step (line 12)`,
    ];
    const res = await runNode([ADMIN_BIN, 'job', 'submit', path], env).exited;
    expect(res.code).toBe(1);
    for (const w of want) expect(res.stderr).toContain(w);
    expect(res.stderr).not.toMatch(/\n\s+at /);
    const json = await runNode([ADMIN_BIN, 'job', 'submit', path, '--json'], env).exited;
    expect(json.code).toBe(1);
    expect(json.stderr).toBe('');
    const body = JSON.parse(json.stdout) as { error: string; problems: string[] };
    expect(body.problems).toEqual(expect.arrayContaining(want));
    expect((await t.api<{ jobs: unknown[] }>('GET', '/api/v1/jobs')).body.jobs).toEqual([]);
  });

  it('the API says "did you mean" too, without a file', async () => {
    const res = await t.api<{ problems: string[] }>('POST', '/api/v1/runs', {
      jobs: { build: { runson: ['linux'], steps: [{ run: 'make' }] } },
    });
    expect(res.status).toBe(400);
    expect(res.body.problems).toEqual(['jobs.build: unknown key "runson" (did you mean "runsOn"?)']);
  });
});
