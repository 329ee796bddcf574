import { mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { LOCK_FILE, lockDataDir, processStartTime } from '../../../src/server/data-dir-lock.js';
import { UserError } from '../../../src/util/errors.js';

const dirs: string[] = [];
afterAll(async () => {
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});
async function dir(): Promise<string> {
  const d = await mkdtemp(join(tmpdir(), 'kici-lock-'));
  dirs.push(d);
  return d;
}
const owner = (pid: number, startTime: string | null) =>
  JSON.stringify({ pid, startTime, hostname: hostname(), startedAt: '2026-01-01T00:00:00.000Z' });

describe('data dir lock', () => {
  it('refuses a dir held by a live process, naming its pid and what to do', async () => {
    const d = await dir();
    // pid 1 is always alive; with its real start time the lock is genuinely held.
    await writeFile(join(d, LOCK_FILE), owner(1, processStartTime(1)));
    const err = await lockDataDir(d).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(UserError);
    expect((err as Error).message).toContain('pid 1');
    expect((err as Error).message).toContain('stop it, or use another --data-dir');
  });

  it('takes over a lock whose pid now belongs to another process (other start time)', async () => {
    const d = await dir();
    await writeFile(join(d, LOCK_FILE), owner(1, 'not-its-start-time'));
    const lock = await lockDataDir(d);
    expect(JSON.parse(await readFile(lock.path, 'utf8')).pid).toBe(process.pid);
    lock.release();
    await expect(stat(lock.path)).rejects.toThrow(/ENOENT/);
  });

  it('takes over an unreadable (half-written) lock, and release leaves a successor alone', async () => {
    const d = await dir();
    await writeFile(join(d, LOCK_FILE), '{"pi');
    const lock = await lockDataDir(d);
    await writeFile(lock.path, owner(1, processStartTime(1)));
    lock.release();
    expect(JSON.parse(await readFile(lock.path, 'utf8')).pid).toBe(1);
  });
});
