import { randomBytes } from 'node:crypto';
import pg from 'pg';

/** The system tier's PostgreSQL, as an admin connection string. */
export function adminUrl(): string {
  const url = process.env.KICI_TEST_DATABASE_URL;
  // Fail loudly (never skip) when the service is missing.
  if (!url) throw new Error('KICI_TEST_DATABASE_URL is not set: source /tmp/kici-sys/env (system tier)');
  return url;
}

export interface TestDatabase {
  name: string;
  url: string;
  /** Run one statement on the admin connection (e.g. pg_terminate_backend). */
  admin<T extends pg.QueryResultRow = pg.QueryResultRow>(text: string, values?: unknown[]): Promise<T[]>;
  /** Run one statement inside this database. */
  query<T extends pg.QueryResultRow = pg.QueryResultRow>(text: string, values?: unknown[]): Promise<T[]>;
  /** Break every connection to this database from outside, as a server restart would. */
  terminateBackends(): Promise<number>;
  drop(): Promise<void>;
}

/** A fresh database per test file (name prefixed by topic), dropped afterwards. */
export async function freshTestDatabase(prefix: string): Promise<TestDatabase> {
  const name = `${prefix}_${randomBytes(5).toString('hex')}`;
  const run = async <T extends pg.QueryResultRow>(
    connectionString: string,
    text: string,
    values?: unknown[],
  ) => {
    const client = new pg.Client({ connectionString });
    client.on('error', () => undefined); // our own terminate calls never target this one
    await client.connect();
    try {
      return (await client.query<T>(text, values)).rows;
    } finally {
      await client.end();
    }
  };
  const admin = <T extends pg.QueryResultRow>(text: string, values?: unknown[]) =>
    run<T>(adminUrl(), text, values);
  await admin(`create database ${name}`);
  const url = new URL(adminUrl());
  url.pathname = `/${name}`;
  const terminateBackends = async () => {
    const rows = await admin<{ n: string }>(
      `select count(pg_terminate_backend(pid)) as n from pg_stat_activity
        where datname = $1 and pid <> pg_backend_pid()`,
      [name],
    );
    return Number(rows[0]!.n);
  };
  return {
    name,
    url: url.toString(),
    admin,
    query: (text, values) => run(url.toString(), text, values),
    terminateBackends,
    async drop() {
      await terminateBackends();
      await admin(`drop database if exists ${name}`);
    },
  };
}
