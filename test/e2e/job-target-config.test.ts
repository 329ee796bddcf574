/**
 * A `job:` provisioning target that cannot work (a file that is not a run file, a missing file, a
 * file that does not parse) is a configuration error: `scaler validate` and `serve` both refuse the
 * config, naming the scaler, the target, the file and the problem, without a stack trace.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freshDataDir } from '../helpers/data-dir.js';
import { ADMIN_BIN, ORCH_BIN, runNode } from '../helpers/orchestrator.js';

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kici-job-target-'));
  await writeFile(
    join(dir, 'good.yaml'),
    stringify({ jobs: { p: { runsOn: ['x'], steps: [{ run: 'true' }] } } }),
  );
  await writeFile(join(dir, 'not-a-run.yaml'), stringify({ version: 1, scalers: [] }));
  await writeFile(join(dir, 'broken.yaml'), 'jobs: [unclosed\n');
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function configWith(target: string): Promise<string> {
  const path = join(dir, `scalers-${Math.random().toString(16).slice(2)}.yaml`);
  await writeFile(
    path,
    stringify({
      version: 1,
      scalers: [
        {
          name: 'cloud',
          type: 'event',
          maxAgents: 1,
          labelSets: [{ labels: ['cloud'] }],
          provisioningTargets: [target],
        },
      ],
    }),
  );
  return path;
}

const cases: [string, string, RegExp][] = [
  ['not a run file', 'job:not-a-run.yaml', /not-a-run\.yaml: .*jobs/],
  ['missing', 'job:nowhere.yaml', /nowhere\.yaml: file not found/],
  ['unparseable', 'job:broken.yaml', /broken\.yaml:\d+:\d+: not valid YAML or JSON/],
];

describe('bad job: templates are configuration errors', () => {
  it.each(cases)(
    '%s: scaler validate exits 1 naming the scaler, target and file',
    async (_n, target, problem) => {
      const config = await configWith(target);
      const res = await runNode([ADMIN_BIN, 'scaler', 'validate', config]).exited;
      expect(res.code, res.stdout + res.stderr).toBe(1);
      expect(res.stdout).toContain(`${config}: invalid, `);
      expect(res.stdout).toContain(
        `scaler "cloud": provisioningTargets[0] "${target}" is not a usable run file`,
      );
      expect(res.stdout).toMatch(problem);
      expect(res.stdout + res.stderr).not.toMatch(/\n\s+at /);
    },
  );

  it('a good template validates', async () => {
    const res = await runNode([ADMIN_BIN, 'scaler', 'validate', await configWith('job:good.yaml')]).exited;
    expect(res.code, res.stdout).toBe(0);
  });

  it('serve refuses to start with a bad template, naming it, and exits 1', async () => {
    const config = await configWith('job:not-a-run.yaml');
    const dataDir = await freshDataDir();
    const res = await runNode([
      ORCH_BIN,
      'serve',
      '--config',
      config,
      '--listen',
      '127.0.0.1:0',
      '--data-dir',
      dataDir,
    ]).exited;
    await rm(dataDir, { recursive: true, force: true });
    expect(res.code).toBe(1);
    expect(res.stderr).toContain('provisioningTargets[0] "job:not-a-run.yaml" is not a usable run file');
    expect(res.stderr).toContain(join(dir, 'not-a-run.yaml'));
    expect(res.stderr).not.toMatch(/\n\s+at /);
  });
});
