import { randomBytes } from 'node:crypto';
import { mkdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from '../../util/logger.js';

/**
 * Cross-process mutual exclusion for one ledger file: `mkdir` is atomic on every local filesystem,
 * so whoever creates `<dir>/<name>.lock` holds the lock.
 *
 * Lock ages compare the directory's mtime with the wall clock (`Date.now()`), not an injected
 * clock: mtimes are written by the kernel in wall-clock time.
 */

export interface FileLockOptions {
  /** A lock directory older than this is assumed abandoned by a crashed holder. */
  staleMs?: number;
  maxAttempts?: number;
  initialDelayMs?: number;
  maxDelayMs?: number;
  logger?: Logger;
}

export const FILE_LOCK_DEFAULTS = {
  staleMs: 30_000,
  maxAttempts: 200,
  initialDelayMs: 5,
  maxDelayMs: 100,
} as const;

export class FileLockError extends Error {
  override readonly name = 'FileLockError';
}

const OWNER_FILE = 'owner';

export function lockPath(dir: string, name: string): string {
  return join(dir, `${name}.lock`);
}

function errCode(err: unknown): string | undefined {
  return (err as { code?: string } | null)?.code;
}

/** Run `fn` while holding `<dir>/<name>.lock`; the lock is removed however `fn` ends. */
export async function withFileLock<T>(
  dir: string,
  name: string,
  fn: () => Promise<T>,
  opts: FileLockOptions = {},
): Promise<T> {
  const path = lockPath(dir, name);
  const token = await acquire(path, opts);
  try {
    return await fn();
  } finally {
    await releaseLock(path, token, opts.logger);
  }
}

async function acquire(path: string, opts: FileLockOptions): Promise<string> {
  const staleMs = opts.staleMs ?? FILE_LOCK_DEFAULTS.staleMs;
  const maxAttempts = opts.maxAttempts ?? FILE_LOCK_DEFAULTS.maxAttempts;
  const maxDelayMs = opts.maxDelayMs ?? FILE_LOCK_DEFAULTS.maxDelayMs;
  let delay = opts.initialDelayMs ?? FILE_LOCK_DEFAULTS.initialDelayMs;
  const token = `${process.pid}-${randomBytes(6).toString('hex')}`;

  for (let attempt = 1; attempt <= maxAttempts; attempt++) {
    try {
      await mkdir(path);
    } catch (err) {
      if (errCode(err) !== 'EEXIST') throw err;
      if (await breakIfStale(path, staleMs, opts.logger)) continue;
      if (attempt < maxAttempts) {
        await sleep(delay);
        delay = Math.min(delay * 2, maxDelayMs);
      }
      continue;
    }
    try {
      // The token lets release() tell our lock from one created after ours was broken as stale.
      await writeFile(join(path, OWNER_FILE), token);
      return token;
    } catch (err) {
      await rm(path, { recursive: true, force: true });
      throw err;
    }
  }
  throw new FileLockError(
    `could not take ledger lock ${path} after ${maxAttempts} attempts; ` +
      `if no orchestrator is using it, remove the directory`,
  );
}

/**
 * Remove an abandoned lock. Breaking happens under a second `mkdir` lock and re-checks the age
 * inside it, so two waiters that both saw the same stale lock cannot have the slower one delete
 * the fresh lock the faster one just created. Returns true when the caller should retry at once.
 */
async function breakIfStale(path: string, staleMs: number, logger?: Logger): Promise<boolean> {
  if (!(await isOlderThan(path, staleMs))) return false;
  const breaker = `${path}.break`;
  try {
    await mkdir(breaker);
  } catch (err) {
    if (errCode(err) !== 'EEXIST') throw err;
    // A breaker left behind by a process that died mid-break would block everyone forever.
    if (await isOlderThan(breaker, staleMs)) await rm(breaker, { recursive: true, force: true });
    return false;
  }
  try {
    if (!(await isOlderThan(path, staleMs))) return false;
    await rm(path, { recursive: true, force: true });
    logger?.warn({ lock: path, staleMs }, 'scaler.ledger removed an abandoned lock');
    return true;
  } finally {
    await rm(breaker, { recursive: true, force: true });
  }
}

async function isOlderThan(path: string, ageMs: number): Promise<boolean> {
  try {
    const st = await stat(path);
    return Date.now() - st.mtimeMs > ageMs;
  } catch (err) {
    if (errCode(err) === 'ENOENT') return false;
    throw err;
  }
}

async function releaseLock(path: string, token: string, logger?: Logger): Promise<void> {
  let owner: string | undefined;
  try {
    owner = await readFile(join(path, OWNER_FILE), 'utf8');
  } catch (err) {
    if (errCode(err) !== 'ENOENT') throw err;
  }
  if (owner !== token) {
    // We held it past the stale age and someone broke it; the lock now belongs to them.
    logger?.warn({ lock: path }, 'scaler.ledger lock was broken while held');
    return;
  }
  await rm(path, { recursive: true, force: true });
}
