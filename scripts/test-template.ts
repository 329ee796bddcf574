/**
 * The migrated database every test starts from, made once for a whole test run: a PGlite data dir
 * (on-disk tests copy its `pg`) and an uncompressed dump of it (in-memory stores load it). Making
 * one costs an initdb and every migration, several seconds of CPU; each vitest process of a run
 * made its own until the runners (test-lanes.ts, system-test.sh) made one and named it to all of
 * them in KICI_TEST_TEMPLATE_DIR (test/helpers/global-setup.ts). Needs the build (dist/).
 *
 * As a command: makes one in a new temporary directory and prints that directory's path.
 */
import { PGlite } from '@electric-sql/pglite';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

/** Where a runner names the template it made for every vitest process of its run. */
export const TEMPLATE_ENV = 'KICI_TEST_TEMPLATE_DIR';

/**
 * `open` migrates a data dir: the build's as a command, the sources' under vitest (whose global
 * set-up makes a template when no runner named one).
 */
export async function makeTestTemplate(
  open: (o: { dataDir: string }) => Promise<{ close(): Promise<void> }>,
): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'kici-template-'));
  const db = await open({ dataDir: dir });
  await db.close();
  const pg = new PGlite(join(dir, 'pg'));
  // dumpDataDir on a PGlite that has not finished starting never settles.
  await pg.waitReady;
  const blob = await pg.dumpDataDir('none');
  await pg.close();
  await writeFile(join(dir, 'dump.tar'), Buffer.from(await blob.arrayBuffer()));
  return dir;
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const { openDatabase } = await import('../dist/store/open.js');
  process.stdout.write(`${await makeTestTemplate(openDatabase)}\n`);
}
