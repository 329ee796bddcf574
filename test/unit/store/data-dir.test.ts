/**
 * Checking the data dir before PGlite sees it: no database dir yet is a first start; a database dir
 * that is there but cannot even be looked at is refused here, naming it, because PGlite would only
 * say that it failed to initialise.
 */
import { mkdir, mkdtemp, rm, stat, symlink } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { prepareDataDir } from '../../../src/store/data-dir.js';
import { UserError } from '../../../src/util/errors.js';

let root: string;
beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'kici-data-dir-'));
});
afterEach(async () => {
  await rm(root, { recursive: true, force: true });
});

describe('prepareDataDir: the database dir', () => {
  it('takes a data dir without one as a first start, and makes the data dir 0700', async () => {
    const dir = join(root, 'data');
    await prepareDataDir(dir);
    expect((await stat(dir)).mode & 0o777).toBe(0o700);
  });

  it('refuses one that cannot be looked at (a symlink loop), naming it', async () => {
    const dir = join(root, 'data');
    await mkdir(dir, { mode: 0o700 });
    await symlink('pg', join(dir, 'pg'));
    const prepared = prepareDataDir(dir);
    await expect(prepared).rejects.toBeInstanceOf(UserError);
    await expect(prepared).rejects.toThrow(`data dir ${dir}: cannot look at ${join(dir, 'pg')}: ELOOP`);
  });
});
