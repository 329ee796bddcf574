import type { Dispatcher } from '../dispatch/dispatcher.js';
import { retentionFromSettings } from '../store/retention/policy.js';
import { throttledConnectionLog } from '../store/pg-pool.js';
import { openDatabase, type OpenedDatabase } from '../store/index.js';
import { WalKeeper } from '../store/wal-keeper.js';
import type { Clock } from '../util/clock.js';
import type { Logger } from '../util/logger.js';
import { holdUntilClosed, lockDataDir } from './data-dir-lock.js';
import { DiskSpaceWatcher } from './disk-watch.js';
import type { Metrics } from './metrics.js';
import type { OrchestratorOptions } from './orchestrator-options.js';
import { StoreProbe } from './readiness.js';
import { RetentionService } from './retention.js';

/**
 * Lock the data dir, then open the store (the given one, or PGlite / PostgreSQL). The lock is let go
 * when the store closes, and so is the readiness probe; a failure here leaves neither held.
 */
export async function openLockedStore(
  opts: OrchestratorOptions,
  dataDir: string,
  log: Logger,
): Promise<{ database: OpenedDatabase; probe: StoreProbe }> {
  const lock = await lockDataDir(dataDir).catch(async (err: unknown) => {
    await opts.database?.close();
    throw err;
  });
  const opened =
    opts.database ??
    (await openDatabase({
      url: opts.databaseUrl,
      dataDir,
      onConnectionError: throttledConnectionLog((f, m) => log.warn(f, m)),
    }).catch((err: unknown) => {
      lock.release();
      throw err;
    }));
  const probeDirs = opened.pgDir ? [dataDir, opened.pgDir] : [dataDir];
  const probe = new StoreProbe(opened.db, probeDirs, log);
  const database = holdUntilClosed(opened, lock, () => probe.stop());
  return { database, probe };
}

/**
 * The store's upkeep: on the embedded store a free-space watch on the data dir and a WAL keeper
 * (a standalone backend never checkpoints by itself), and on every engine the retention service.
 */
export class StoreUpkeep {
  readonly disk: DiskSpaceWatcher | undefined;
  readonly walKeeper: WalKeeper | undefined;
  readonly retention: RetentionService;

  constructor(deps: {
    opts: OrchestratorOptions;
    database: OpenedDatabase;
    dataDir: string;
    dispatcher: Dispatcher;
    metrics: Metrics;
    clock: Clock;
    log: Logger;
  }) {
    const { opts, database, dispatcher, clock, log } = deps;
    if (database.engine === 'pglite') {
      const disk = new DiskSpaceWatcher(deps.dataDir, log, opts.dataMinFreeBytes);
      disk.whenChanged((low) => void (low || dispatcher.requestPump()));
      // Near the floor, no new job starts and output waits in memory; results are still stored.
      dispatcher.holdNewWorkWhile(() => disk.low);
      dispatcher.logs.holdWritesWhile(() => disk.low);
      this.disk = disk;
      this.walKeeper = new WalKeeper(database.db, clock, log);
    }
    this.retention = new RetentionService(
      database.db,
      database.engine,
      opts.retention ?? retentionFromSettings({}),
      () => clock.now(),
      deps.metrics,
      log,
    );
  }

  /** The disk watch, then the WAL keeper; retention runs as a leader task of the cluster node. */
  start(): void {
    this.disk?.start();
    this.walKeeper?.start();
  }

  async stop(): Promise<void> {
    this.disk?.stop();
    await this.walKeeper?.stop();
  }
}
