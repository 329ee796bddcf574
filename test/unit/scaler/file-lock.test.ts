import { mkdir, mkdtemp, readdir, rm, stat, utimes } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { FileLockError, lockPath, withFileLock } from '../../../src/scaler/ledger/file-lock.js';

describe('withFileLock', () => {
  let dir: string;
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'kici-lock-'));
  });
  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  const ageBy = async (path: string, seconds: number): Promise<void> => {
    const t = new Date(Date.now() - seconds * 1_000);
    await utimes(path, t, t);
  };

  it('holds <dir>/<name>.lock while running and removes it afterwards, also on failure', async () => {
    await withFileLock(dir, 'pool', async () => {
      expect((await stat(lockPath(dir, 'pool'))).isDirectory()).toBe(true);
    });
    await expect(
      withFileLock(dir, 'pool', async () => {
        throw new Error('inside');
      }),
    ).rejects.toThrow('inside');
    expect(await readdir(dir)).toEqual([]);
  });

  it('serialises concurrent holders', async () => {
    let inside = 0;
    let maxInside = 0;
    const order: number[] = [];
    await Promise.all(
      Array.from({ length: 8 }, (_, i) =>
        withFileLock(dir, 'pool', async () => {
          inside += 1;
          maxInside = Math.max(maxInside, inside);
          await new Promise((r) => setTimeout(r, 2));
          order.push(i);
          inside -= 1;
        }),
      ),
    );
    expect(maxInside).toBe(1);
    expect(order).toHaveLength(8);
  });

  it('breaks a lock directory older than 30 s', async () => {
    await mkdir(lockPath(dir, 'pool'));
    await ageBy(lockPath(dir, 'pool'), 31);
    const started = Date.now();
    await expect(withFileLock(dir, 'pool', async () => 'got it')).resolves.toBe('got it');
    expect(Date.now() - started).toBeLessThan(1_000);
    expect(await readdir(dir)).toEqual([]);
  });

  it('many waiters on one stale lock still get in one at a time', async () => {
    await mkdir(lockPath(dir, 'pool'));
    await ageBy(lockPath(dir, 'pool'), 120);
    let inside = 0;
    let maxInside = 0;
    await Promise.all(
      Array.from({ length: 6 }, () =>
        withFileLock(dir, 'pool', async () => {
          inside += 1;
          maxInside = Math.max(maxInside, inside);
          await new Promise((r) => setTimeout(r, 3));
          inside -= 1;
        }),
      ),
    );
    expect(maxInside).toBe(1);
    expect(await readdir(dir)).toEqual([]);
  });

  it('gives up on a live lock after the attempt budget with a clear error', async () => {
    await mkdir(lockPath(dir, 'pool'));
    await ageBy(lockPath(dir, 'pool'), 20); // old, but not stale
    const err = await withFileLock(dir, 'pool', async () => 'never', { maxAttempts: 4 }).catch(
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(FileLockError);
    expect((err as Error).message).toMatch(/could not take ledger lock .*pool\.lock after 4 attempts/);
  });

  it('clears an abandoned breaker directory too', async () => {
    await mkdir(lockPath(dir, 'pool'));
    await mkdir(`${lockPath(dir, 'pool')}.break`);
    await ageBy(lockPath(dir, 'pool'), 60);
    await ageBy(`${lockPath(dir, 'pool')}.break`, 60);
    await expect(withFileLock(dir, 'pool', async () => 1)).resolves.toBe(1);
    expect(await readdir(dir)).toEqual([]);
  });

  it('does not delete a lock that was broken and retaken while it was held', async () => {
    const path = lockPath(dir, 'pool');
    await withFileLock(dir, 'pool', async () => {
      // Simulate: we stalled past the stale age, a peer broke our lock and now holds its own.
      await rm(path, { recursive: true });
      await mkdir(path);
    });
    expect((await stat(path)).isDirectory()).toBe(true);
  });
});
