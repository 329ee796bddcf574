/**
 * The bootstrap admin token: written once, outside the data dir, mode 0600; instances sharing the
 * file share the token; a missing file gets a new token; a revoked one is not brought back.
 */
import { mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { defaultAdminTokenFile, ensureBootstrapToken } from '../../../src/access/bootstrap-token.js';
import { freshStore } from '../../helpers/data-dir.js';

const logger = pino({ level: 'silent' });
let fresh: Awaited<ReturnType<typeof freshStore>>;
let etc: string;

beforeEach(async () => {
  fresh = await freshStore();
  etc = await mkdtemp(join(tmpdir(), 'kici-etc-test-'));
});
afterEach(async () => {
  await fresh.close();
  await rm(etc, { recursive: true, force: true });
});

const ensure = (file: string, instanceId = 'orch-a') =>
  ensureBootstrapToken({
    file,
    dataDir: fresh.dir,
    tokens: fresh.store.accessTokens,
    instanceId,
    now: new Date(),
    logger,
  });

describe('bootstrap admin token', () => {
  it('is written once, mode 0600, and accepted as an admin token', async () => {
    const file = join(etc, 'kici', 'admin-token');
    const first = await ensure(file);
    expect(first.outcome).toBe('created');
    expect((await stat(file)).mode & 0o777).toBe(0o600);
    expect((await readFile(file, 'utf8')).trim()).toBe(first.token);
    const check = await fresh.store.accessTokens.check(first.token, new Date());
    expect(check.ok && check.token.role).toBe('admin');
    const again = await ensure(file, 'orch-b');
    expect(again).toEqual({ token: first.token, outcome: 'existing' });
    expect(await fresh.store.accessTokens.list()).toHaveLength(1);
  });

  it('gives instances racing on one file one token, and leaves no stray rows', async () => {
    const file = join(etc, 'admin-token');
    const results = await Promise.all(['a', 'b', 'c', 'd'].map((id) => ensure(file, `orch-${id}`)));
    expect(new Set(results.map((r) => r.token)).size).toBe(1);
    expect(await fresh.store.accessTokens.list()).toHaveLength(1);
  });

  it('makes another token for a host whose file is missing; both are valid', async () => {
    const a = await ensure(join(etc, 'a-token'), 'orch-a');
    const b = await ensure(join(etc, 'b-token'), 'orch-b');
    expect(b.outcome).toBe('created');
    expect(b.token).not.toBe(a.token);
    for (const t of [a, b]) expect((await fresh.store.accessTokens.check(t.token, new Date())).ok).toBe(true);
  });

  it('imports a token the database has never seen, and does not revive a revoked one', async () => {
    const file = join(etc, 'admin-token');
    await writeFile(file, 'kici_at_copied-from-another-host\n', { mode: 0o600 });
    const imported = await ensure(file);
    expect(imported).toEqual({ token: 'kici_at_copied-from-another-host', outcome: 'imported' });
    const [row] = await fresh.store.accessTokens.list();
    await fresh.store.accessTokens.revoke(row!.id, new Date());
    const dead = await ensure(file, 'orch-b');
    expect(dead.outcome).toBe('dead');
    expect((await fresh.store.accessTokens.check(dead.token, new Date())).ok).toBe(false);
    expect(await fresh.store.accessTokens.list()).toHaveLength(0);
  });

  it('uses the row of an instance that imported the same file between its look and its insert', async () => {
    const file = join(etc, 'admin-token');
    await writeFile(file, 'kici_at_copied-to-every-host\n', { mode: 0o600 });
    const real = fresh.store.accessTokens;
    const imported = await ensure(file, 'orch-a');
    expect(imported.outcome).toBe('imported');
    // orch-b looked before orch-a's row was there, so its own insert meets the unique key.
    const tokens = Object.create(real) as typeof real;
    let looks = 0;
    tokens.findBySecret = (secret) =>
      looks++ === 0 ? Promise.resolve(undefined) : real.findBySecret(secret);
    const late = await ensureBootstrapToken({
      file,
      dataDir: fresh.dir,
      tokens,
      instanceId: 'orch-b',
      now: new Date(),
      logger,
    });
    expect(late).toEqual({ token: 'kici_at_copied-to-every-host', outcome: 'existing' });
    expect(await real.list()).toHaveLength(1);
  });

  it('reports a store that fails an import as itself, not as a race lost three times', async () => {
    const file = join(etc, 'admin-token');
    await writeFile(file, 'kici_at_copied-from-another-host\n', { mode: 0o600 });
    const tokens = Object.create(fresh.store.accessTokens) as typeof fresh.store.accessTokens;
    tokens.create = () => Promise.reject(new Error('Connection terminated unexpectedly'));
    const failed = ensureBootstrapToken({
      file,
      dataDir: fresh.dir,
      tokens,
      instanceId: 'orch-a',
      now: new Date(),
      logger,
    });
    await expect(failed).rejects.toThrow('Connection terminated unexpectedly');
  });

  it('refuses a file inside the data dir, naming the fix, and removes the old data-dir token', async () => {
    await expect(ensure(join(fresh.dir, 'admin-token'))).rejects.toThrow(/outside it.*--admin-token-file/);
    await writeFile(join(fresh.dir, 'admin-token'), 'kici_admin_old\n');
    await ensure(join(etc, 'admin-token'));
    await expect(stat(join(fresh.dir, 'admin-token'))).rejects.toThrow(/ENOENT/);
    expect((await fresh.store.accessTokens.check('kici_admin_old', new Date())).ok).toBe(false);
  });

  it('defaults outside any data dir: the env, /etc/kici for root, else the config dir', () => {
    expect(defaultAdminTokenFile({ KICI_ADMIN_TOKEN_FILE: '/x/t' }, 1000)).toBe('/x/t');
    expect(defaultAdminTokenFile({}, 0)).toBe('/etc/kici/admin-token');
    expect(defaultAdminTokenFile({ XDG_CONFIG_HOME: '/c' }, 1000)).toBe('/c/kici/admin-token');
    expect(defaultAdminTokenFile({ HOME: '/home/k' }, 1000)).toBe('/home/k/.config/kici/admin-token');
  });
});
