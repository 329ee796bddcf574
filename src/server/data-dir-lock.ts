import { closeSync, openSync, readFileSync, unlinkSync, writeSync } from 'node:fs';
import { hostname } from 'node:os';
import { join, resolve } from 'node:path';
import { prepareDataDir } from '../store/data-dir.js';
import type { OpenedDatabase } from '../store/index.js';
import { UserError, errorMessage } from '../util/errors.js';

/**
 * One orchestrator per data dir. Two servers on one embedded database each keep their own copy
 * of it and silently undo each other's writes, so the second one must refuse to start.
 *
 * The lock is a file created with O_EXCL holding the owner's pid and that process's start time.
 * A lock whose pid is gone, or now belongs to a different process (pid reuse after a crash), is
 * stale and taken over.
 */

export const LOCK_FILE = 'orchestrator.lock';

interface LockOwner {
  pid: number;
  /** Kernel start time of the pid (clock ticks since boot), so a reused pid is not mistaken for us. */
  startTime: string | null;
  hostname: string;
  startedAt: string;
}

/** Field 22 of /proc/<pid>/stat, or null where /proc is not available. */
export function processStartTime(pid: number): string | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command name (field 2) may hold spaces and parentheses: count from its closing one.
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19] ?? null;
  } catch {
    return null;
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

function readOwner(path: string): LockOwner | undefined {
  try {
    const v = JSON.parse(readFileSync(path, 'utf8')) as Partial<LockOwner>;
    if (typeof v.pid !== 'number' || !Number.isInteger(v.pid) || v.pid <= 0) return undefined;
    return {
      pid: v.pid,
      startTime: typeof v.startTime === 'string' ? v.startTime : null,
      hostname: typeof v.hostname === 'string' ? v.hostname : '',
      startedAt: typeof v.startedAt === 'string' ? v.startedAt : '',
    };
  } catch {
    return undefined;
  }
}

/** Does the recorded owner still run? Another host's lock counts as live: we cannot check it. */
function ownerLives(o: LockOwner): boolean {
  if (o.hostname && o.hostname !== hostname()) return true;
  if (o.pid === process.pid) return false;
  if (!isAlive(o.pid)) return false;
  const now = processStartTime(o.pid);
  return o.startTime === null || now === null || now === o.startTime;
}

export interface DataDirLock {
  path: string;
  release(): void;
}

export async function lockDataDir(dataDir: string): Promise<DataDirLock> {
  await prepareDataDir(dataDir);
  const path = join(resolve(dataDir), LOCK_FILE);
  const me: LockOwner = {
    pid: process.pid,
    startTime: processStartTime(process.pid),
    hostname: hostname(),
    startedAt: new Date().toISOString(),
  };
  // Two attempts: the second follows the removal of a stale lock.
  for (let attempt = 0; attempt < 3; attempt++) {
    let fd: number;
    try {
      fd = openSync(path, 'wx', 0o600);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code !== 'EEXIST') throw new UserError(`data dir lock ${path}: ${errorMessage(err)}`);
      const owner = readOwner(path);
      if (owner && ownerLives(owner)) throw inUse(dataDir, owner);
      // Stale (its process is gone) or unreadable (a crash mid-write): take it over.
      try {
        unlinkSync(path);
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== 'ENOENT')
          throw new UserError(`data dir lock ${path}: cannot remove a stale lock: ${errorMessage(e)}`);
      }
      continue;
    }
    try {
      writeSync(fd, JSON.stringify(me) + '\n');
    } finally {
      closeSync(fd);
    }
    let released = false;
    return {
      path,
      release() {
        if (released) return;
        released = true;
        // Only remove our own lock: never one a successor took over.
        if (readOwner(path)?.pid === process.pid) {
          try {
            unlinkSync(path);
          } catch {
            // already gone
          }
        }
      },
    };
  }
  throw new UserError(`data dir lock ${path}: another process keeps taking it; try again`);
}

function inUse(dataDir: string, o: LockOwner): UserError {
  const where = o.hostname && o.hostname !== hostname() ? ` on host ${o.hostname}` : '';
  return new UserError(
    `data dir ${resolve(dataDir)} is in use by another kici-orchestrator (pid ${o.pid}${where}, ` +
      `started ${o.startedAt || 'at an unknown time'}): stop it, or use another --data-dir`,
  );
}

/**
 * The lock lives exactly as long as the database: closing it (on stop, or after a failed start)
 * runs `cleanup` and releases the lock.
 */
export function holdUntilClosed(db: OpenedDatabase, lock: DataDirLock, cleanup: () => void): OpenedDatabase {
  return {
    ...db,
    async close() {
      cleanup();
      try {
        await db.close();
      } finally {
        lock.release();
      }
    },
  };
}

/**
 * Files the orchestrator creates (new database files, tokens) are its own: umask 077. Agents it
 * starts inherit this and put back a usual umask for the steps they run (see cli/agent.ts).
 */
export function restrictUmask(): void {
  try {
    process.umask(0o077);
  } catch {
    // Worker threads may not change the umask; the chmod pass after opening still applies.
  }
}
