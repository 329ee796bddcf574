/** `job:` provisioning targets stay inside the config directory and are small. */
import { mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { isProvisioningTarget } from '../../../src/config/entry-schema.js';
import { JOB_TARGET_MAX_BYTES, readJobTarget } from '../../../src/scaler/events/job-target.js';

const dirs: string[] = [];
afterEach(async () => {
  for (const d of dirs.splice(0)) await rm(d, { recursive: true, force: true });
});

async function configDir() {
  const root = await mkdtemp(join(tmpdir(), 'kici-jobtarget-'));
  dirs.push(root);
  const dir = join(root, 'etc');
  await mkdir(join(dir, 'jobs'), { recursive: true });
  await writeFile(join(root, 'secret.yaml'), 'outside-secret-line: 1\n');
  return { root, dir, config: join(dir, 'scalers.yaml') };
}

describe('job: targets', () => {
  it('the config refuses a target that is absolute or climbs out with ..', () => {
    for (const bad of [
      'job:../x.yaml',
      'job:jobs/../../x.yaml',
      'job:/etc/passwd',
      'job:..',
      'job:a\\..\\..\\b',
    ])
      expect(isProvisioningTarget(bad), bad).toBe(false);
    for (const good of ['job:provision.yaml', 'job:jobs/p.yaml', 'job:./p.yaml', 'job:a..b.yaml'])
      expect(isProvisioningTarget(good), good).toBe(true);
  });

  it('reads a template inside the config directory', async () => {
    const { dir, config } = await configDir();
    await writeFile(join(dir, 'jobs', 'p.yaml'), 'jobs: {}\n');
    expect(await readJobTarget(config, 'jobs/p.yaml')).toEqual({
      path: join(dir, 'jobs', 'p.yaml'),
      text: 'jobs: {}\n',
    });
  });

  it('refuses .. and absolute paths without reading them', async () => {
    const { config } = await configDir();
    for (const file of ['../secret.yaml', '/etc/passwd']) {
      const err = await readJobTarget(config, file).catch((e: Error) => e);
      expect(err).toBeInstanceOf(Error);
      expect((err as Error).message).toMatch(/inside the config directory/);
      expect((err as Error).message).not.toMatch(/outside-secret-line|root:/);
    }
  });

  it('refuses a symbolic link that leads out of the config directory', async () => {
    const { root, dir, config } = await configDir();
    await symlink(join(root, 'secret.yaml'), join(dir, 'jobs', 'link.yaml'));
    await symlink('/etc/passwd', join(dir, 'passwd.yaml'));
    for (const file of ['jobs/link.yaml', 'passwd.yaml']) {
      const err = (await readJobTarget(config, file).catch((e: Error) => e)) as Error;
      expect(err.message).toMatch(/leads outside the config directory/);
      expect(err.message).not.toMatch(/outside-secret-line|root:/);
    }
    // A link that stays inside is fine.
    await writeFile(join(dir, 'real.yaml'), 'jobs: {}\n');
    await symlink(join(dir, 'real.yaml'), join(dir, 'jobs', 'inside.yaml'));
    expect((await readJobTarget(config, 'jobs/inside.yaml')).text).toBe('jobs: {}\n');
  });

  it('refuses a file over the size cap, and one that is not a file', async () => {
    const { dir, config } = await configDir();
    await writeFile(join(dir, 'big.yaml'), 'x'.repeat(JOB_TARGET_MAX_BYTES + 1));
    await expect(readJobTarget(config, 'big.yaml')).rejects.toThrow(/at most 262144/);
    await writeFile(join(dir, 'edge.yaml'), 'x'.repeat(JOB_TARGET_MAX_BYTES));
    expect((await readJobTarget(config, 'edge.yaml')).text).toHaveLength(JOB_TARGET_MAX_BYTES);
    await expect(readJobTarget(config, 'jobs')).rejects.toThrow(/not a regular file/);
    await expect(readJobTarget(config, 'missing.yaml')).rejects.toThrow(/missing\.yaml: file not found/);
  });
});
