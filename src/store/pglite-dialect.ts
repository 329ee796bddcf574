import {
  CompiledQuery,
  PostgresAdapter,
  PostgresIntrospector,
  PostgresQueryCompiler,
  type DatabaseConnection,
  type Dialect,
  type Driver,
  type Kysely,
  type QueryResult,
  type TransactionSettings,
} from 'kysely';
import type { PGlite } from '@electric-sql/pglite';
import { PGliteStatements } from './pglite-statements.js';

/**
 * Kysely over PGlite. PGlite is one in-process connection, so the driver hands out that single
 * connection behind a FIFO mutex: a transaction holds it from BEGIN to COMMIT and no other query
 * can slip in between.
 */
export class PGliteDialect implements Dialect {
  constructor(private readonly pglite: PGlite) {}
  createAdapter() {
    return new PostgresAdapter();
  }
  createDriver(): Driver {
    return new PGliteDriver(this.pglite);
  }
  createQueryCompiler() {
    return new PostgresQueryCompiler();
  }
  createIntrospector(db: Kysely<unknown>) {
    return new PostgresIntrospector(db);
  }
}

class PGliteConnection implements DatabaseConnection {
  private readonly statements: PGliteStatements;
  constructor(pglite: PGlite) {
    this.statements = new PGliteStatements(pglite);
  }

  async executeQuery<R>(query: CompiledQuery): Promise<QueryResult<R>> {
    const res = await this.statements.run<R>(query.sql, query.parameters);
    return {
      rows: res.rows,
      ...(res.affectedRows !== undefined ? { numAffectedRows: BigInt(res.affectedRows) } : {}),
    };
  }

  /** Queries in one call and one implicit transaction (see PGliteStatements.runPipeline). */
  async pipeline(queries: readonly CompiledQuery[]): Promise<QueryResult<unknown>[]> {
    const res = await this.statements.runPipeline(queries.map((q) => ({ sql: q.sql, params: q.parameters })));
    return res.map((r) => ({ rows: r.rows, numAffectedRows: BigInt(r.affectedRows ?? 0) }));
  }

  // eslint-disable-next-line require-yield
  async *streamQuery<R>(): AsyncIterableIterator<QueryResult<R>> {
    throw new Error('streaming queries are not supported on the embedded database');
  }
}

/**
 * Run compiled queries in one call into the embedded database, as one implicit transaction (in
 * order; an error rolls back all of them). Undefined when `db` is not on PGlite: PostgreSQL over
 * the network has no such call in `pg`, and a round trip per statement would cost more there.
 */
export async function runPipelined(
  db: Kysely<unknown>,
  queries: readonly CompiledQuery[],
): Promise<QueryResult<unknown>[] | undefined> {
  return db
    .getExecutor()
    .provideConnection(async (conn) =>
      conn instanceof PGliteConnection ? conn.pipeline(queries) : undefined,
    );
}

/** Is `db` on the embedded database (where `runPipelined` works)? */
export async function isPipelined(db: Kysely<unknown>): Promise<boolean> {
  return db.getExecutor().provideConnection(async (conn) => conn instanceof PGliteConnection);
}

class PGliteDriver implements Driver {
  private readonly connection: PGliteConnection;
  private tail: Promise<void> = Promise.resolve();
  private releaseCurrent: (() => void) | undefined;

  constructor(private readonly pglite: PGlite) {
    this.connection = new PGliteConnection(pglite);
  }

  async init(): Promise<void> {
    await this.pglite.waitReady;
  }

  async acquireConnection(): Promise<DatabaseConnection> {
    const previous = this.tail;
    let release!: () => void;
    this.tail = new Promise<void>((resolve) => (release = resolve));
    await previous;
    this.releaseCurrent = release;
    return this.connection;
  }

  async beginTransaction(conn: DatabaseConnection, settings: TransactionSettings): Promise<void> {
    const level = settings.isolationLevel ? ` isolation level ${settings.isolationLevel}` : '';
    await conn.executeQuery(CompiledQuery.raw(`begin${level}`));
  }

  async commitTransaction(conn: DatabaseConnection): Promise<void> {
    await conn.executeQuery(CompiledQuery.raw('commit'));
  }

  async rollbackTransaction(conn: DatabaseConnection): Promise<void> {
    await conn.executeQuery(CompiledQuery.raw('rollback'));
  }

  async releaseConnection(): Promise<void> {
    const release = this.releaseCurrent;
    this.releaseCurrent = undefined;
    release?.();
  }

  async destroy(): Promise<void> {
    await this.tail;
    await this.pglite.close();
  }
}
