import { fdatasyncSync, readlinkSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import { afterAll, describe, expect, it } from 'vitest';
import { spawn } from 'node:child_process';
import { pathToFileURL } from 'node:url';
import { ROOT } from '../../helpers/orchestrator.js';
import {
  dataSyncFromEnv,
  installFileSync,
  startParamsFor,
  type NodeFileLayer,
} from '../../../src/store/durability.js';
import { SyncGate } from '../../../src/store/sync-gate.js';

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

/** An embedded database of its own with sync on, each sync's file path recorded. */
async function syncedDatabase() {
  const dir = await mkdtemp(join(tmpdir(), 'kici-durability-'));
  dirs.push(dir);
  const pg = new PGlite(join(dir, 'pg'), { startParams: startParamsFor(PGlite.defaultStartParams, 'on') });
  await pg.waitReady;
  const synced: string[] = [];
  const record = (fd: number) => {
    fdatasyncSync(fd);
    synced.push(readlinkSync(`/proc/self/fd/${fd}`));
  };
  const gate = installFileSync(
    pg.Module as unknown as NodeFileLayer,
    new SyncGate(record, async (fd) => record(fd)),
  );
  return { pg, synced, gate };
}

describe('the embedded database with sync on', () => {
  it('syncs the write-ahead log before a commit returns', async () => {
    const { pg, synced } = await syncedDatabase();
    await pg.exec('create table t (x int)');
    for (let i = 0; i < 5; i++) {
      const before = synced.length;
      await pg.query('insert into t values ($1)', [i]);
      // Every commit, once returned, has had its log synced.
      expect(synced.slice(before).some((p) => p.includes('/pg_wal/'))).toBe(true);
    }
    await pg.close();
  });

  it("holds a commit's sync while asked, then syncs the log at the flush", async () => {
    const { pg, synced, gate } = await syncedDatabase();
    await pg.exec('create table t (x int)');
    const before = synced.length;
    await gate.holdDuring(() => pg.query('insert into t values (1)'));
    expect(synced.slice(before)).toEqual([]);
    expect(gate.pending).toBeGreaterThan(0);
    await gate.flush();
    expect(synced.slice(before).some((p) => p.includes('/pg_wal/'))).toBe(true);
    expect(gate.pending).toBe(0);
    await pg.close();
  });

  it('keeps a held commit when the process is killed before the flush: its log was written', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'kici-durability-'));
    dirs.push(dir);
    const dist = (f: string) => pathToFileURL(join(ROOT, 'dist/store', f)).href;
    // A process of its own commits with the sync held, says so, and is killed before any flush.
    const child = spawn(
      process.execPath,
      [
        '--input-type=module',
        '-e',
        `import { PGlite } from '@electric-sql/pglite';
         import { fdatasyncSync } from 'node:fs';
         import { installFileSync, startParamsFor } from '${dist('durability.js')}';
         import { SyncGate } from '${dist('sync-gate.js')}';
         const pg = new PGlite(${JSON.stringify(join(dir, 'pg'))}, { startParams: startParamsFor(PGlite.defaultStartParams, 'on') });
         await pg.waitReady;
         const gate = installFileSync(pg.Module, new SyncGate(fdatasyncSync));
         await pg.exec('create table t (x int)');
         await gate.holdDuring(() => pg.query('insert into t values (42)'));
         process.stdout.write('held ' + gate.pending + '\\n');
         setInterval(() => {}, 60_000);`,
      ],
      { cwd: ROOT, stdio: ['ignore', 'pipe', 'inherit'] },
    );
    const said = await new Promise<string>((ok, fail) => {
      let out = '';
      child.stdout.on('data', (b: Buffer) => {
        out += b.toString();
        if (out.includes('\n')) ok(out.trim());
      });
      child.once('exit', (code) => fail(new Error(`the writer exited (${code}) before its commit: ${out}`)));
    });
    expect(said).toMatch(/^held [1-9]/);
    const exited = new Promise((ok) => child.once('exit', ok));
    child.kill('SIGKILL');
    await exited;
    const pg = new PGlite(join(dir, 'pg'));
    expect((await pg.query<{ x: number }>('select x from t')).rows).toEqual([{ x: 42 }]);
    await pg.close();
  });
});
