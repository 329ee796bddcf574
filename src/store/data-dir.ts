import { constants } from 'node:fs';
import { access, chmod, lstat, mkdir, readdir, stat } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { errorMessage, UserError } from '../util/errors.js';

/**
 * The data dir holds the embedded database, the admin token and the instance id: only the
 * orchestrator's own user may read it. It is created 0700, and checked before PGlite sees it,
 * because PGlite reports a directory it cannot use only as "failed to initialize".
 */

function who(): string {
  const uid = process.getuid?.();
  return uid === undefined ? 'this user' : `uid ${uid}`;
}

function code(err: unknown): string | undefined {
  return (err as NodeJS.ErrnoException).code;
}

/** Refuse a directory we cannot read, enter and write, naming the path and what is missing. */
async function checkAccess(dir: string, what: string): Promise<void> {
  try {
    await access(dir, constants.R_OK | constants.W_OK | constants.X_OK);
  } catch (err) {
    if (code(err) === 'EACCES' || code(err) === 'EPERM' || code(err) === 'EROFS')
      throw new UserError(
        `${what} ${dir}: permission denied: the orchestrator (${who()}) needs read and write access ` +
          `to it and to everything in it (check its owner and mode, or use another --data-dir)`,
      );
    throw err;
  }
}

/** Create (0700) or check the data dir and, when it exists, the embedded database's directory. */
export async function prepareDataDir(dataDir: string): Promise<void> {
  const dir = resolve(dataDir);
  try {
    await mkdir(dir, { recursive: true, mode: 0o700 });
  } catch (err) {
    if (code(err) === 'EACCES' || code(err) === 'EROFS')
      throw new UserError(`data dir ${dir}: permission denied: cannot create it as ${who()}`);
    if (code(err) === 'ENOTDIR' || code(err) === 'EEXIST')
      throw new UserError(`data dir ${dir}: not a directory`);
    throw err;
  }
  const st = await stat(dir);
  if (!st.isDirectory()) throw new UserError(`data dir ${dir}: not a directory`);
  await checkAccess(dir, 'data dir');
  const pg = join(dir, 'pg');
  // No pg dir yet is the normal first start; PGlite creates it. Anything else (a symlink loop, an
  // I/O error) would reach PGlite, which names neither the path nor the cause: say it here.
  const pgSt = await stat(pg).catch((err: unknown) => {
    if (code(err) === 'ENOENT') return undefined;
    throw new UserError(`data dir ${dir}: cannot look at ${pg}: ${errorMessage(err)}`);
  });
  if (pgSt) {
    if (!pgSt.isDirectory()) throw new UserError(`data dir ${dir}: ${pg} is not a directory`);
    await checkAccess(pg, 'database dir');
  }
  // An older release created the dir 0755; close it to other users (only its owner can, and the
  // owner's chmod of its own dir cannot be refused: the check on uid comes first).
  if (st.mode & 0o077 && st.uid === process.getuid?.()) await chmod(dir, 0o700).catch(() => {});
}

/**
 * Take group and world bits off everything under `dir`. PGlite writes its initial files (and a
 * few caches it rewrites at start-up) world-readable whatever the umask, so this runs once the
 * database is open; files it creates later follow the process umask.
 */
export async function tightenModes(dir: string): Promise<void> {
  const uid = process.getuid?.();
  const stack = [dir];
  while (stack.length) {
    const current = stack.pop()!;
    // Entries can vanish while PGlite rewrites its caches: a missing one has no mode to tighten.
    const entries = await readdir(current, { withFileTypes: true }).catch(() => []);
    for (const e of entries) {
      const path = join(current, e.name);
      if (e.isDirectory()) stack.push(path);
      if (!e.isDirectory() && !e.isFile()) continue;
      // PGlite may remove a file while the sweep runs: nothing left to tighten.
      const st = await lstat(path).catch(() => undefined);
      if (!st || !(st.mode & 0o077) || (uid !== undefined && st.uid !== uid)) continue;
      // PGlite may remove a file while the sweep runs: nothing left to tighten.
      await chmod(path, st.mode & 0o700).catch(() => {});
    }
  }
}
