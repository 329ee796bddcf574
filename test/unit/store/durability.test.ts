import { fdatasyncSync, readlinkSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import { afterAll, describe, expect, it } from 'vitest';
import {
  dataSyncFromEnv,
  installFileSync,
  startParamsFor,
  type NodeFileLayer,
} from '../../../src/store/durability.js';

const dirs: string[] = [];
afterAll(async () => {
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

describe('KICI_DATA_SYNC', () => {
  it('defaults to on, takes on and off, and names the variable for anything else', () => {
    expect(dataSyncFromEnv({})).toBe('on');
    expect(dataSyncFromEnv({ KICI_DATA_SYNC: ' ' })).toBe('on');
    expect(dataSyncFromEnv({ KICI_DATA_SYNC: 'off' })).toBe('off');
    expect(() => dataSyncFromEnv({ KICI_DATA_SYNC: 'fast' })).toThrow(
      /KICI_DATA_SYNC: expected "on" or "off", got "fast"/,
    );
  });

  it('on drops the no-sync flag and flushes the log with fsync; off keeps it', () => {
    const defaults = PGlite.defaultStartParams;
    expect(defaults).toContain('-F');
    const on = startParamsFor(defaults, 'on');
    expect(on).not.toContain('-F');
    expect(on.join(' ')).toContain('wal_sync_method=fsync');
    const off = startParamsFor(defaults, 'off');
    expect(off.slice(0, defaults.length)).toEqual(defaults);
    // Both bound the log, which would otherwise grow to 1 GB before a checkpoint.
    for (const params of [on, off]) expect(params.join(' ')).toContain('max_wal_size=64MB');
  });
});

describe('the embedded database with sync on', () => {
  it('syncs the write-ahead log before a commit returns', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'kici-durability-'));
    dirs.push(dir);
    const pg = new PGlite(join(dir, 'pg'), {
      startParams: startParamsFor(PGlite.defaultStartParams, 'on'),
    });
    await pg.waitReady;
    const synced: string[] = [];
    installFileSync(pg.Module as unknown as NodeFileLayer, (fd) => {
      fdatasyncSync(fd);
      synced.push(readlinkSync(`/proc/self/fd/${fd}`));
    });
    await pg.exec('create table t (x int)');
    for (let i = 0; i < 5; i++) {
      const before = synced.length;
      await pg.query('insert into t values ($1)', [i]);
      // Every commit, once returned, has had its log synced.
      expect(synced.slice(before).some((p) => p.includes('/pg_wal/'))).toBe(true);
    }
    await pg.close();
  });
});
