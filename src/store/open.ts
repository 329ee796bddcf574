import { fdatasyncSync } from 'node:fs';
import { defaultDataDir } from '../util/default-data-dir.js';
import { Kysely, PostgresDialect, sql } from 'kysely';
import { PGlite } from '@electric-sql/pglite';
import { UserError, errorMessage } from '../util/errors.js';
import { prepareDataDir, tightenModes } from './data-dir.js';
import { PGliteDialect } from './pglite-dialect.js';
import { migrateToLatest } from './migrations.js';
import { createPgPool, type ConnectionErrorSink } from './pg-pool.js';
import type { Database } from './schema.js';
import {
  dataSyncFromEnv,
  installFileSync,
  startParamsFor,
  type DataSync,
  type NodeFileLayer,
} from './durability.js';
import { SyncGate } from './sync-gate.js';

export type StoreEngine = 'pglite' | 'postgres';

export interface OpenedDatabase {
  db: Kysely<Database>;
  engine: StoreEngine;
  /** Where the embedded database keeps its files; absent for PostgreSQL and an in-memory PGlite. */
  pgDir?: string | undefined;
  close(): Promise<void>;
  /**
   * A consistent copy of the embedded database's files (a gzip tarball), taken between
   * transactions while the server keeps serving; absent on PostgreSQL (use pg_dump).
   */
  snapshot?: () => Promise<Uint8Array>;
  /** The embedded database's syncs, when each commit is synced: some can be held back (sync-gate.ts). */
  syncGate?: SyncGate | undefined;
}

export interface OpenDatabaseOptions {
  /** External PostgreSQL (`KICI_DATABASE_URL`); when absent the embedded PGlite is used. */
  url?: string | undefined;
  /** PGlite data directory (`KICI_DATA_DIR`). */
  dataDir?: string | undefined;
  /** Told when PostgreSQL drops a connection (restart, pg_terminate_backend); never fatal. */
  onConnectionError?: ConnectionErrorSink | undefined;
  /**
   * An embedded database held in memory, started from a tarball of a data dir (PGlite's
   * `dumpDataDir()`), in place of `dataDir`: nothing is read from or written to disk. Starting from
   * a dump skips initdb and a copy of the files, which is what makes throw-away stores cheap for
   * tests and tools; the product always keeps its database on disk.
   */
  memoryFrom?: Blob | undefined;
  /** Sync each commit to stable storage (`KICI_DATA_SYNC`, default `on`); the embedded store only. */
  dataSync?: DataSync | undefined;
  /** The call that makes a file's writes durable (fdatasync by default); tests record it. */
  fileSync?: ((fd: number) => void) | undefined;
}

/** Open the store and bring its schema up to date. */
export async function openDatabase(opts: OpenDatabaseOptions): Promise<OpenedDatabase> {
  if (opts.url) {
    const pool = createPgPool(opts.url, opts.onConnectionError ?? (() => undefined));
    const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
    await migrateToLatest(db as Kysely<unknown>);
    return { db, engine: 'postgres', close: () => db.destroy() };
  }
  if (opts.memoryFrom) return openPGlite(new PGlite({ loadDataDir: opts.memoryFrom }), undefined);
  const dataDir = opts.dataDir ?? defaultDataDir();
  const pgDir = `${dataDir}/pg`;
  await prepareDataDir(dataDir);
  const sync = opts.dataSync ?? dataSyncFromEnv();
  let pglite: PGlite;
  let gate: SyncGate | undefined;
  try {
    pglite = new PGlite(pgDir, { startParams: startParamsFor(PGlite.defaultStartParams, sync) });
    await pglite.waitReady;
    if (sync === 'on')
      gate = installFileSync(
        pglite.Module as unknown as NodeFileLayer,
        // A recording sync given by a test sees the held syncs too, on the main thread a moment later.
        opts.fileSync
          ? new SyncGate(opts.fileSync, async (fd) => opts.fileSync?.(fd))
          : new SyncGate(fdatasyncSync),
      );
  } catch (err) {
    // PGlite's own message ("failed to initialize properly") names neither the path nor the cause.
    throw new UserError(
      `data dir ${pgDir}: the embedded database could not start (${errorMessage(err)}); ` +
        'check that the directory is a kici data dir, readable and writable by this user',
    );
  }
  const opened = await openPGlite(pglite, pgDir);
  await tightenModes(dataDir);
  return { ...opened, syncGate: gate };
}

/**
 * The triggers that wake the other instances on a shared PostgreSQL when jobs are queued
 * (migrations 007, 012, 030). The embedded store has one instance and nobody listening, yet each
 * submit and requeue paid for the statement trigger's table of changed rows: a single-job submit
 * took 0.92 ms with it and 0.75 without, back to back (1.93 and 1.79 ms 20 ms apart). They are
 * disabled there, not dropped, so both engines keep one schema.
 */
const WAKE_UP_TRIGGERS = ['jobs_notify_queued_insert', 'jobs_notify_queued_update_row'];

/**
 * Put the store on an embedded database the caller has built (on disk or in memory) and bring its
 * schema up to date; closing the returned handle closes `pglite`.
 */
export async function openPGlite(pglite: PGlite, pgDir: string | undefined): Promise<OpenedDatabase> {
  const db = new Kysely<Database>({ dialect: new PGliteDialect(pglite) });
  await migrateToLatest(db as Kysely<unknown>);
  for (const t of WAKE_UP_TRIGGERS) await sql`alter table jobs disable trigger ${sql.id(t)}`.execute(db);
  // Holding the one connection keeps every transaction out while the files are copied; the
  // checkpoint first makes the copy start up without replaying the log.
  const snapshot = () =>
    db.connection().execute(async (conn) => {
      await sql`checkpoint`.execute(conn);
      return new Uint8Array(await (await pglite.dumpDataDir('gzip')).arrayBuffer());
    });
  return { db, engine: 'pglite', pgDir, close: () => db.destroy(), snapshot };
}
