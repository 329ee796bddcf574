/**
 * The embedded database never checkpoints by itself (it has no checkpointer process), so its log
 * keeps every segment ever written. The keeper checkpoints once a segment's worth of log has
 * accumulated, and the segments before it are recycled: the log stays at a few files.
 */
import { readdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { sql } from 'kysely';
import { afterAll, describe, expect, it } from 'vitest';
import { openDatabase, type OpenedDatabase } from '../../../src/store/open.js';
import { WalKeeper, WAL_CHECKPOINT_BYTES } from '../../../src/store/wal-keeper.js';
import { ManualClock } from '../../../src/util/clock.js';
import { createLogger } from '../../../src/util/logger.js';
import { freshDataDir } from '../../helpers/data-dir.js';

const opened: { db: OpenedDatabase; dir: string }[] = [];
afterAll(async () => {
  for (const o of opened) {
    await o.db.close();
    await rm(o.dir, { recursive: true, force: true });
  }
});

async function store(): Promise<{ db: OpenedDatabase; dir: string }> {
  const dir = await freshDataDir();
  const db = await openDatabase({ dataDir: dir, dataSync: 'off' });
  await sql`create table filler (id serial primary key, pad text not null)`.execute(db.db);
  await sql`alter table filler alter column pad set storage external`.execute(db.db);
  const o = { db, dir };
  opened.push(o);
  return o;
}

/** Write about `mib` MiB of log: 128 rows of 8 KiB, stored uncompressed, per commit. */
async function writeLog(db: OpenedDatabase, mib: number): Promise<void> {
  for (let i = 0; i < mib; i++)
    await sql`insert into filler (pad)
      select (select string_agg(md5(random()::text), '') from generate_series(1, 256))
      from generate_series(1, 128)`.execute(db.db);
}

async function segments(dir: string): Promise<number> {
  const files = await readdir(join(dir, 'pg', 'pg_wal'));
  return files.filter((f) => /^[0-9A-F]{24}$/.test(f)).length;
}

const silent = createLogger({ level: 'silent' });

describe('WalKeeper', () => {
  it('control: without it, the log keeps every segment it writes', async () => {
    const { db, dir } = await store();
    await writeLog(db, 80);
    expect(await segments(dir)).toBeGreaterThanOrEqual(5);
  });

  it('checkpoints past a segment of log, on its clock, and the log stays at a few segments', async () => {
    const { db, dir } = await store();
    const clock = new ManualClock();
    const keeper = new WalKeeper(db.db, clock, silent);
    keeper.start(1_000);
    for (let round = 0; round < 8; round++) {
      await writeLog(db, 10);
      clock.advance(1_000);
      await keeper.check(); // joins the check the timer started
    }
    await keeper.stop();
    expect(keeper.count).toBeGreaterThanOrEqual(3);
    expect(await keeper.pendingBytes()).toBeLessThan(WAL_CHECKPOINT_BYTES + 10 * 2 ** 20);
    // 80 MiB written; the log holds what min_wal_size keeps for reuse plus the current segment.
    expect(await segments(dir)).toBeLessThanOrEqual(4);
  });

  it('does nothing while less than a segment of log is pending', async () => {
    const { db } = await store();
    const keeper = new WalKeeper(db.db, new ManualClock(), silent);
    await sql`checkpoint`.execute(db.db);
    await writeLog(db, 2);
    await keeper.check();
    expect(keeper.count).toBe(0);
    expect(await keeper.pendingBytes()).toBeGreaterThan(2 ** 20);
  });
});
