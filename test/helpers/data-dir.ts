import { cp, mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { inject } from 'vitest';
import { createStore, openDatabase, type OpenedDatabase, type Store } from '../../src/store/index.js';

/**
 * A private copy of the migrated template data dir, for tests of the data dir itself and for
 * servers in other processes. A store inside this process is cheaper from `memoryDatabase()`.
 */
export async function freshDataDir(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'kici-test-'));
  await cp(join(inject('templateDataDir'), 'pg'), join(dir, 'pg'), { recursive: true });
  return dir;
}

let dump: Promise<Blob> | undefined;

/** The migrated template's database as a tarball, read once per test file. */
export function templateDump(): Promise<Blob> {
  return (dump ??= readFile(inject('templateDump')).then((b) => new Blob([b])));
}

/**
 * A migrated embedded database of its own, held in memory and started from the template's dump:
 * well under a second, against a few seconds for a copied data dir.
 */
export async function memoryDatabase(): Promise<OpenedDatabase> {
  return openDatabase({ memoryFrom: await templateDump() });
}

/**
 * A private migrated store. In memory, so `dir` is an empty directory of its own (kept for callers
 * that put files beside the store); it is removed on close.
 */
export async function freshStore(): Promise<{
  store: Store;
  db: OpenedDatabase;
  dir: string;
  close(): Promise<void>;
}> {
  const [db, dir] = await Promise.all([memoryDatabase(), mkdtemp(join(tmpdir(), 'kici-test-'))]);
  return {
    store: createStore(db.db),
    db,
    dir,
    close: async () => {
      await db.close();
      await rm(dir, { recursive: true, force: true });
    },
  };
}
