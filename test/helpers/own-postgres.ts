/**
 * A PostgreSQL server of the test's own (initdb in a temporary directory, its own port and socket
 * directory), for faults that restart the server: the system tier's shared server must never be
 * restarted, other suites use it. Runs as the `postgres` user, in whatever network namespace the
 * test runs in.
 */
import { execFile } from 'node:child_process';
import { chown, mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { freePort } from './crash.js';

const exec = promisify(execFile);

export interface OwnPostgres {
  /** A fresh database on this server, as a connection string. */
  database(name: string): Promise<string>;
  /** `pg_ctl restart -m fast`: every connection is ended, the server is away until it is back up. */
  restart(): Promise<void>;
  stop(): Promise<void>;
}

async function pgBin(): Promise<string> {
  const versions = (await readdir('/usr/lib/postgresql')).sort((a, b) => Number(a) - Number(b));
  if (!versions.length) throw new Error('PostgreSQL is not installed: apt-get install postgresql');
  return `/usr/lib/postgresql/${versions.at(-1)}/bin`;
}

export async function startOwnPostgres(): Promise<OwnPostgres> {
  const bin = await pgBin();
  const dir = await mkdtemp(join(tmpdir(), 'kici-own-pg-'));
  const { uid, gid } = await exec('id', ['-u', 'postgres']).then(async (u) => ({
    uid: Number(u.stdout),
    gid: Number((await exec('id', ['-g', 'postgres'])).stdout),
  }));
  await chown(dir, uid, gid);
  const data = join(dir, 'data');
  const port = await freePort();
  const asPg = (tool: string, args: string[]) =>
    exec('runuser', ['-u', 'postgres', '--', join(bin, tool), ...args], { timeout: 120_000 });
  await asPg('initdb', ['-D', data, '-A', 'trust', '-U', 'postgres', '--no-sync']);
  const opts = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off`;
  const ctl = (...args: string[]) => asPg('pg_ctl', ['-D', data, '-l', join(dir, 'pg.log'), '-w', ...args]);
  await ctl('-o', opts, 'start');
  const url = (db: string) => `postgres://postgres@127.0.0.1:${port}/${db}`;
  return {
    async database(name) {
      const client = new pg.Client({ connectionString: url('postgres') });
      await client.connect();
      try {
        await client.query(`create database ${name}`);
      } finally {
        await client.end();
      }
      return url(name);
    },
    async restart() {
      await ctl('-m', 'fast', '-o', opts, 'restart');
    },
    async stop() {
      await ctl('-m', 'immediate', 'stop').catch(() => undefined);
      await rm(dir, { recursive: true, force: true });
    },
  };
}
