import { parse, protocol, type PGlite, type Results } from '@electric-sql/pglite';

/**
 * Running queries on PGlite through named prepared statements, one call into the database per
 * query. `PGlite.query` parses, describes and plans every query afresh and makes six calls into the
 * WebAssembly module for it; on the hot path (the same few statements thousands of times) that fixed
 * cost was most of the orchestrator's CPU per job. Here a statement is parsed once and its plan is
 * cached by PostgreSQL; each run sends bind, describe, execute and sync in one message.
 */

const { serialize } = protocol;

/** Statements worth keeping: data reads and writes. Transaction control and DDL go as simple queries. */
const CACHEABLE = /^\s*(select|insert|update|delete|with)\b/i;
const TRANSACTION_CONTROL = /^\s*(begin|commit|rollback|savepoint|release|start transaction)\b/i;
/** Kept statements (least recently used evicted). Texts that vary with the row count do not pile up. */
const MAX_STATEMENTS = 200;

interface Prepared {
  name: string;
  /** Parameter type ids, as the database inferred them: they choose each value's serializer. */
  oids: number[];
}

function concat(parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

export class PGliteStatements {
  private readonly prepared = new Map<string, Prepared>();
  private counter = 0;

  constructor(private readonly pglite: PGlite) {}

  async run<R>(sql: string, params: readonly unknown[]): Promise<Results<R>> {
    if (!CACHEABLE.test(sql)) {
      // Parameterless control statements (begin, commit, DDL) in one simple-protocol round trip.
      const res = params.length
        ? await this.pglite.query<R>(sql, params as unknown[])
        : this.last<R>(await this.exec(serialize.query(sql)));
      // A kept `select *` must not outlive a change of its table's shape ("cached plan must not
      // change result type"): any schema change (migrations only, so rare) drops every statement.
      if (!TRANSACTION_CONTROL.test(sql) && this.prepared.size) {
        this.prepared.clear();
        await this.exec(serialize.query('deallocate all'));
      }
      return res;
    }
    const st = await this.statement(sql);
    const values = params.map((p, i) => this.serialize(p, st.oids[i]));
    const msg = concat([
      serialize.bind({ statement: st.name, values }),
      serialize.describe({ type: 'P' }),
      serialize.execute({}),
      serialize.sync(),
    ]);
    return this.last<R>(await this.exec(msg));
  }

  /**
   * Several statements in one call into the database, as one implicit transaction: they run in
   * order, and an error in any rolls all of them back (PostgreSQL's extended protocol does this
   * for the messages up to a Sync). One result per statement.
   */
  async runPipeline(queries: readonly { sql: string; params: readonly unknown[] }[]): Promise<Results[]> {
    const parts: Uint8Array[] = [];
    for (const q of queries) {
      if (!CACHEABLE.test(q.sql)) throw new Error('only data statements can be pipelined');
      const st = await this.statement(q.sql);
      const values = q.params.map((p, i) => this.serialize(p, st.oids[i]));
      parts.push(
        serialize.bind({ statement: st.name, values }),
        serialize.describe({ type: 'P' }),
        serialize.execute({}),
      );
    }
    parts.push(serialize.sync());
    const results = parse.parseResults(await this.exec(concat(parts)), this.pglite.parsers);
    // parseResults counts affected rows cumulatively; each statement's own count is its rowCount.
    return results.map((r) => ({ ...r, affectedRows: (r as { rowCount?: number }).rowCount ?? 0 }));
  }

  /** The statement for this text, prepared on first use; a hit moves it to the young end. */
  private async statement(sql: string): Promise<Prepared> {
    const hit = this.prepared.get(sql);
    if (hit) {
      this.prepared.delete(sql);
      this.prepared.set(sql, hit);
      return hit;
    }
    const name = `kici_${++this.counter}`;
    const messages = await this.exec(
      concat([
        serialize.parse({ name, text: sql }),
        serialize.describe({ type: 'S', name }),
        serialize.sync(),
      ]),
    );
    const st = { name, oids: parse.parseDescribeStatementResults(messages) };
    this.prepared.set(sql, st);
    if (this.prepared.size > MAX_STATEMENTS) {
      const [oldSql, old] = this.prepared.entries().next().value as [string, Prepared];
      this.prepared.delete(oldSql);
      await this.exec(concat([serialize.close({ type: 'S', name: old.name }), serialize.sync()]));
    }
    return st;
  }

  private serialize(value: unknown, oid: number | undefined): string | null {
    if (value === null || value === undefined) return null;
    const s = oid === undefined ? undefined : this.pglite.serializers[oid];
    return s ? s(value) : String(value);
  }

  private async exec(msg: Uint8Array) {
    return (await this.pglite.execProtocol(msg)).messages;
  }

  private last<R>(messages: Parameters<typeof parse.parseResults>[0]): Results<R> {
    const results = parse.parseResults(messages, this.pglite.parsers);
    return (results[results.length - 1] ?? { rows: [], fields: [] }) as Results<R>;
  }
}
