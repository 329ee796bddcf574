import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { formatIssuePath, parseRunSpec, type RunSpec } from '../../../src/jobs/run-spec.js';

type Obj = Record<string, unknown>;

const step = (run = 'make test'): Obj => ({ run });
const jobOf = (extra: Obj = {}): Obj => ({ runsOn: ['linux'], steps: [step()], ...extra });
const runOf = (jobs: Obj, extra: Obj = {}): Obj => ({ jobs, ...extra });

function ok(input: unknown): RunSpec {
  const res = parseRunSpec(input);
  if (!res.ok) throw new Error(`expected a valid run spec, got:\n${res.problems.join('\n')}`);
  return res.value;
}

function problemsOf(input: unknown): string[] {
  const res = parseRunSpec(input);
  if (res.ok) throw new Error(`expected problems for ${JSON.stringify(input)}`);
  return res.problems;
}

describe('parseRunSpec: valid input', () => {
  it('accepts the run file from the product spec', () => {
    const spec = ok({
      name: 'nightly',
      jobs: {
        build: {
          runsOn: ['linux', 'bm'],
          timeoutSeconds: 600,
          env: { FOO: 'bar' },
          resources: { limits: { cpus: 1, memory: '512m' } },
          container: { image: 'ci/node:24' },
          steps: [{ name: 'compile', run: 'echo hello && make', timeoutSeconds: 300 }],
        },
      },
    });
    expect(spec.name).toBe('nightly');
    expect(spec.jobs.build).toEqual({
      runsOn: ['linux', 'bm'],
      timeoutSeconds: 600,
      env: { FOO: 'bar' },
      resources: { limits: { cpus: 1, memory: '512m' } },
      container: { image: 'ci/node:24' },
      steps: [{ name: 'compile', run: 'echo hello && make', timeoutSeconds: 300 }],
      role: 'execution',
    });
  });

  it.each([
    { what: 'a single runsOn string becomes a list', job: jobOf({ runsOn: 'linux' }), runsOn: ['linux'] },
    { what: 'a runsOn list is kept as written', job: jobOf({ runsOn: ['b', 'A'] }), runsOn: ['b', 'A'] },
  ])('$what', ({ job, runsOn }) => {
    expect(ok(runOf({ j: job })).jobs.j!.runsOn).toEqual(runsOn);
  });

  it.each(['execution', 'build', 'init'])('accepts role %s', (role) => {
    expect(ok(runOf({ j: jobOf({ role }) })).jobs.j!.role).toBe(role);
  });

  it.each(['512m', '2g', '1024k', '1.5G', '4 M'])('accepts memory %j', (memory) => {
    expect(ok(runOf({ j: jobOf({ resources: { requests: { memory } } }) })).jobs.j!.resources).toEqual({
      requests: { memory },
    });
  });

  it.each(['a', 'A1', 'build.linux', 'x_y-z', 'a'.repeat(100)])('accepts job name %j', (name) => {
    expect(Object.keys(ok(runOf({ [name]: jobOf() })).jobs)).toEqual([name]);
  });

  it('accepts labels a job must never run next to', () => {
    expect(
      ok(runOf({ j: jobOf({ excludeLabels: ['slow', 'kici:scaler:old'] }) })).jobs.j!.excludeLabels,
    ).toEqual(['slow', 'kici:scaler:old']);
  });

  it('keeps several jobs in the order written', () => {
    const spec = ok(runOf({ zeta: jobOf(), alpha: jobOf(), mid: jobOf() }));
    expect(Object.keys(spec.jobs)).toEqual(['zeta', 'alpha', 'mid']);
  });
});

describe('parseRunSpec: every problem names its path', () => {
  const CASES: { what: string; input: unknown; path: string; says?: RegExp }[] = [
    { what: 'not an object', input: 'jobs', path: '(root)' },
    { what: 'no jobs key', input: {}, path: 'jobs' },
    { what: 'empty jobs', input: runOf({}), path: 'jobs', says: /at least one job/ },
    {
      what: 'unknown top-level key',
      input: runOf({ j: jobOf() }, { jbos: 1 }),
      path: '(root)',
      says: /jbos/,
    },
    { what: 'empty run name', input: runOf({ j: jobOf() }, { name: '' }), path: 'name' },
    {
      what: 'bad job name',
      input: runOf({ 'has space': jobOf() }),
      path: 'jobs.has space',
      says: /job name/,
    },
    {
      what: 'job name too long',
      input: runOf({ ['a'.repeat(101)]: jobOf() }),
      // Keys longer than 100 characters are clipped when quoted back.
      path: `jobs.${'a'.repeat(100)}…`,
    },
    { what: 'job is not an object', input: runOf({ j: 'make' }), path: 'jobs.j' },
    { what: 'missing runsOn', input: runOf({ j: { steps: [step()] } }), path: 'jobs.j.runsOn' },
    { what: 'empty runsOn list', input: runOf({ j: jobOf({ runsOn: [] }) }), path: 'jobs.j.runsOn' },
    { what: 'empty runsOn string', input: runOf({ j: jobOf({ runsOn: '' }) }), path: 'jobs.j.runsOn' },
    { what: 'runsOn of the wrong type', input: runOf({ j: jobOf({ runsOn: 5 }) }), path: 'jobs.j.runsOn' },
    {
      what: 'no steps',
      input: runOf({ j: jobOf({ steps: [] }) }),
      path: 'jobs.j.steps',
      says: /at least one step/,
    },
    {
      what: 'empty run',
      input: runOf({ j: jobOf({ steps: [step(''), step()] }) }),
      path: 'jobs.j.steps[0].run',
    },
    {
      what: 'second step bad',
      input: runOf({ j: jobOf({ steps: [step(), { run: 'x', timeoutSeconds: 0 }] }) }),
      path: 'jobs.j.steps[1].timeoutSeconds',
    },
    {
      what: 'unknown step key',
      input: runOf({ j: jobOf({ steps: [{ run: 'x', shell: 'zsh' }] }) }),
      path: 'jobs.j.steps[0]',
      says: /shell/,
    },
    {
      what: 'bad step env name',
      input: runOf({ j: jobOf({ steps: [{ run: 'x', env: { '1BAD': 'v' } }] }) }),
      path: 'jobs.j.steps[0].env.1BAD',
      says: /environment variable/,
    },
    { what: 'bad job env name', input: runOf({ j: jobOf({ env: { 'A-B': 'v' } }) }), path: 'jobs.j.env.A-B' },
    { what: 'env value not a string', input: runOf({ j: jobOf({ env: { A: 1 } }) }), path: 'jobs.j.env.A' },
    {
      what: 'empty excluded label',
      input: runOf({ j: jobOf({ excludeLabels: ['ok', ''] }) }),
      path: 'jobs.j.excludeLabels[1]',
    },
    {
      what: 'excluded labels not a list',
      input: runOf({ j: jobOf({ excludeLabels: 'slow' }) }),
      path: 'jobs.j.excludeLabels',
    },
    { what: 'unknown role', input: runOf({ j: jobOf({ role: 'deploy' }) }), path: 'jobs.j.role' },
    {
      what: 'fractional timeout',
      input: runOf({ j: jobOf({ timeoutSeconds: 1.5 }) }),
      path: 'jobs.j.timeoutSeconds',
    },
    {
      what: 'empty image',
      input: runOf({ j: jobOf({ container: { image: '' } }) }),
      path: 'jobs.j.container.image',
    },
    {
      what: 'dockerfile container',
      input: runOf({ j: jobOf({ container: { image: 'x', dockerfile: 'D' } }) }),
      path: 'jobs.j.container',
      says: /dockerfile/,
    },
    {
      what: 'flat resources',
      input: runOf({ j: jobOf({ resources: { cpus: 2 } }) }),
      path: 'jobs.j.resources',
      says: /cpus/,
    },
    {
      what: 'zero cpus',
      input: runOf({ j: jobOf({ resources: { limits: { cpus: 0 } } }) }),
      path: 'jobs.j.resources.limits.cpus',
    },
    {
      what: 'too many cpus',
      input: runOf({ j: jobOf({ resources: { requests: { cpus: 257 } } }) }),
      path: 'jobs.j.resources.requests.cpus',
    },
    {
      what: 'decimal memory unit',
      input: runOf({ j: jobOf({ resources: { limits: { memory: '4Gi' } } }) }),
      path: 'jobs.j.resources.limits.memory',
      says: /memory size/,
    },
    {
      what: 'memory too large to be a number',
      input: runOf({ j: jobOf({ resources: { limits: { memory: `${'9'.repeat(400)}g` } } }) }),
      path: 'jobs.j.resources.limits.memory',
    },
  ];

  it.each(CASES)('$what → $path', ({ input, path, says }) => {
    const problems = problemsOf(input);
    const hit = problems.find((p) => p.startsWith(`${path}: `));
    expect(hit, `no problem at ${path} in:\n${problems.join('\n')}`).toBeDefined();
    if (says) expect(hit).toMatch(says);
    for (const p of problems) expect(p).toMatch(/^\S.*?: \S/);
  });

  it('lists every problem at once, each with its own path', () => {
    const problems = problemsOf(
      runOf({
        a: { runsOn: [], steps: [] },
        b: jobOf({ role: 'boss', steps: [step(), step('')] }),
      }),
    );
    expect(problems.map((p) => p.split(': ')[0]).sort()).toEqual(
      ['jobs.a.runsOn', 'jobs.a.steps', 'jobs.b.role', 'jobs.b.steps[1].run'].sort(),
    );
  });

  it('reports a bad memory string once', () => {
    for (const memory of ['4Gi', `${'9'.repeat(400)}g`]) {
      const problems = problemsOf(runOf({ j: jobOf({ resources: { requests: { memory } } }) }));
      expect(problems).toEqual([
        'jobs.j.resources.requests.memory: a memory size like "512m", "2g" or "1024k" (binary units)',
      ]);
    }
  });

  it('refuses more than 10,000 jobs in one run', () => {
    const jobs: Obj = {};
    for (let i = 0; i <= 10_000; i++) jobs[`j${i}`] = jobOf();
    expect(problemsOf(runOf(jobs))).toEqual(['jobs: at most 10000 jobs in one run']);
    delete jobs.j0;
    expect(Object.keys(ok(runOf(jobs)).jobs)).toHaveLength(10_000);
  });
});

describe('formatIssuePath', () => {
  it.each([
    { path: [], want: '(root)' },
    { path: ['jobs'], want: 'jobs' },
    { path: ['jobs', 'build', 'steps', 0, 'run'], want: 'jobs.build.steps[0].run' },
    { path: ['jobs', 'b', 'steps', 12], want: 'jobs.b.steps[12]' },
    { path: [0, 'x'], want: '[0].x' },
  ])('$path → $want', ({ path, want }) => {
    expect(formatIssuePath(path)).toBe(want);
  });
});

describe('parseRunSpec properties', () => {
  it('accepts any well-formed run and keeps what it was given', () => {
    const nameArb = fc.stringMatching(/^[A-Za-z0-9][A-Za-z0-9_.-]{0,20}$/);
    const labelArb = fc.string({ minLength: 1, maxLength: 12 });
    const jobArb = fc.record(
      {
        runsOn: fc.oneof(labelArb, fc.array(labelArb, { minLength: 1, maxLength: 4 })),
        steps: fc.array(fc.record({ run: fc.string({ minLength: 1, maxLength: 30 }) }), {
          minLength: 1,
          maxLength: 4,
        }),
        role: fc.constantFrom('execution', 'build', 'init'),
        timeoutSeconds: fc.integer({ min: 1, max: 86_400 }),
      },
      { requiredKeys: ['runsOn', 'steps'] },
    );
    fc.assert(
      fc.property(fc.dictionary(nameArb, jobArb, { minKeys: 1, maxKeys: 5 }), (jobs) => {
        const spec = ok({ jobs });
        expect(Object.keys(spec.jobs)).toEqual(Object.keys(jobs));
        for (const [name, j] of Object.entries(jobs)) {
          const got = spec.jobs[name]!;
          expect(got.runsOn).toEqual(typeof j.runsOn === 'string' ? [j.runsOn] : j.runsOn);
          expect(got.steps).toEqual(j.steps);
          expect(got.role).toBe(j.role ?? 'execution');
        }
      }),
      { numRuns: 200 },
    );
  });
});
