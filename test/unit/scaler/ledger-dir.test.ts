import { mkdtemp, readdir, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  defaultLedgerDirs,
  LedgerDirError,
  resolveLedgerDir,
} from '../../../src/scaler/ledger/ledger-dir.js';

describe('resolveLedgerDir', () => {
  let root: string;
  let blocker: string;
  beforeEach(async () => {
    root = await mkdtemp(join(tmpdir(), 'kici-ledger-dir-'));
    // A regular file: nothing can be created beneath it, even by root.
    blocker = join(root, 'not-a-dir');
    await writeFile(blocker, '');
  });
  afterEach(async () => {
    await rm(root, { recursive: true, force: true });
  });

  it('orders the defaults: system, XDG state (or ~/.local/state), TMPDIR', () => {
    expect(defaultLedgerDirs({ env: { XDG_STATE_HOME: '/xdg', TMPDIR: '/t' }, homeDir: '/home/u' })).toEqual([
      '/var/lib/kici/scaler-ledger',
      '/xdg/kici/scaler-ledger',
      '/t/kici-scaler-ledger',
    ]);
    expect(defaultLedgerDirs({ env: { TMPDIR: '/t' }, homeDir: '/home/u' })[1]).toBe(
      '/home/u/.local/state/kici/scaler-ledger',
    );
  });

  it('creates and uses an explicit directory, leaving no probe file behind', async () => {
    const explicit = join(root, 'a', 'b');
    expect(await resolveLedgerDir({ explicitDir: explicit })).toBe(explicit);
    expect((await stat(explicit)).isDirectory()).toBe(true);
    expect(await readdir(explicit)).toEqual([]);
  });

  it('fails on an unusable explicit directory instead of silently falling back', async () => {
    await expect(resolveLedgerDir({ explicitDir: join(blocker, 'x') })).rejects.toThrow(
      /ledger directory .*not-a-dir\/x is not usable/,
    );
  });

  it('falls through to the first default that can be created and written', async () => {
    const env = { XDG_STATE_HOME: join(root, 'xdg'), TMPDIR: join(root, 'tmp') };
    const systemDir = join(blocker, 'system');
    expect(await resolveLedgerDir({ systemDir, env, homeDir: root })).toBe(
      join(root, 'xdg', 'kici', 'scaler-ledger'),
    );
    const noXdg = { XDG_STATE_HOME: join(blocker, 'xdg'), TMPDIR: join(root, 'tmp') };
    expect(await resolveLedgerDir({ systemDir, env: noXdg, homeDir: root })).toBe(
      join(root, 'tmp', 'kici-scaler-ledger'),
    );
  });

  it('errors when nothing is usable, naming every candidate', async () => {
    const env = { XDG_STATE_HOME: join(blocker, 'xdg'), TMPDIR: join(blocker, 'tmp') };
    const err = await resolveLedgerDir({ systemDir: join(blocker, 's'), env, homeDir: root }).catch(
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(LedgerDirError);
    expect((err as Error).message).toContain(join(blocker, 's'));
    expect((err as Error).message).toContain(join(blocker, 'tmp', 'kici-scaler-ledger'));
  });
});
