import { cp, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { inject } from 'vitest';
import { createStore, openDatabase, type OpenedDatabase, type Store } from '../../src/store/index.js';

/** A private copy of the migrated template data dir. */
export async function freshDataDir(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'kici-test-'));
  await cp(join(inject('templateDataDir'), 'pg'), join(dir, 'pg'), { recursive: true });
  return dir;
}

export async function freshStore(): Promise<{
  store: Store;
  db: OpenedDatabase;
  dir: string;
  close(): Promise<void>;
}> {
  const dir = await freshDataDir();
  const db = await openDatabase({ dataDir: dir });
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
