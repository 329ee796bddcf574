/**
 * Prepared statements on the embedded database: the same answers as PGlite's own `query` for every
 * kind of value the stores send, one parse per statement text, a bounded cache, and errors that
 * leave the connection usable (inside and outside a transaction).
 */
import { PGlite } from '@electric-sql/pglite';
import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import { PGliteStatements } from '../../../src/store/pglite-statements.js';
import { templateDump } from '../../helpers/data-dir.js';

let db: PGlite | undefined;
afterEach(async () => {
  await db?.close();
  db = undefined;
});

async function setup() {
  // Started from the migrated template's dump: no initdb (seconds) per test.
  db = new PGlite({ loadDataDir: await templateDump() });
  await db.exec(
    `create table t (id text primary key, n int, doc jsonb, tags text[], at timestamptz, ok boolean)`,
  );
  return { db, st: new PGliteStatements(db) };
}

async function preparedCount(pg: PGlite): Promise<number> {
  const r = await pg.query<{ n: number }>(`select count(*)::int as n from pg_prepared_statements`);
  return r.rows[0]!.n;
}

describe('PGliteStatements', () => {
  it('answers as PGlite.query does, for text, int, jsonb, arrays, timestamps, booleans and nulls', async () => {
    const { db: pg, st } = await setup();
    const row = fc.record({
      n: fc.option(fc.integer({ min: -1e6, max: 1e6 }), { nil: null }),
      doc: fc.option(fc.dictionary(fc.string({ maxLength: 5 }), fc.oneof(fc.integer(), fc.string())), {
        nil: null,
      }),
      tags: fc.array(
        fc.string({ maxLength: 6 }).filter((s) => !s.includes('\0')),
        { maxLength: 4 },
      ),
      at: fc.date({ min: new Date(0), max: new Date(4e12), noInvalidDate: true }),
      ok: fc.boolean(),
    });
    let i = 0;
    await fc.assert(
      fc.asyncProperty(row, async (r) => {
        const id = `r${i++}`;
        const insert = `insert into t (id, n, doc, tags, at, ok) values ($1, $2, $3, $4, $5, $6) returning *`;
        const ours = await st.run(insert, [id, r.n, r.doc, r.tags, r.at.toISOString(), r.ok]);
        const theirs = await pg.query(`select * from t where id = $1`, [id]);
        expect(ours.rows).toEqual(theirs.rows);
        const sel = await st.run(`select * from t where id = $1 and tags = $2`, [id, r.tags]);
        expect(sel.rows).toEqual(theirs.rows);
      }),
      { numRuns: 60 },
    );
  });

  it('parses a statement text once, however often it runs, and counts affected rows', async () => {
    const { db: pg, st } = await setup();
    for (let k = 0; k < 20; k++) await st.run(`insert into t (id, n) values ($1, $2)`, [`a${k}`, k]);
    const before = await preparedCount(pg);
    const upd = await st.run(`update t set n = n + 1 where n >= $1`, [10]);
    expect(upd.affectedRows).toBe(10);
    for (let k = 0; k < 20; k++) await st.run(`update t set n = n + 1 where n >= $1`, [10]);
    expect(await preparedCount(pg)).toBe(before + 1);
    expect((await st.run<{ n: number }>(`select sum(n)::int as n from t`, [])).rows[0]!.n).toBe(
      190 + 21 * 10,
    );
  });

  it('keeps at most 200 statements: the least recently used is closed', async () => {
    const { db: pg, st } = await setup();
    for (let k = 0; k < 260; k++) await st.run(`select $1::int + ${k} as v`, [1]);
    expect(await preparedCount(pg)).toBe(200);
    // A text that was evicted is prepared again and still answers.
    expect((await st.run<{ v: number }>(`select $1::int + 0 as v`, [5])).rows[0]!.v).toBe(5);
    expect(await preparedCount(pg)).toBe(200);
  });

  it('rejects with the database error and stays usable, in and out of a transaction', async () => {
    const { st } = await setup();
    await st.run(`insert into t (id) values ($1)`, ['x']);
    await expect(st.run(`insert into t (id) values ($1)`, ['x'])).rejects.toMatchObject({ code: '23505' });
    expect((await st.run(`select id from t`, [])).rows).toEqual([{ id: 'x' }]);
    await expect(st.run(`select nope from t where id = $1`, ['x'])).rejects.toMatchObject({ code: '42703' });

    await st.run('begin', []);
    await st.run(`insert into t (id) values ($1)`, ['y']);
    await expect(st.run(`insert into t (id) values ($1)`, ['y'])).rejects.toMatchObject({ code: '23505' });
    await expect(st.run(`select 1`, [])).rejects.toMatchObject({ code: '25P02' }); // aborted transaction
    await st.run('rollback', []);
    expect((await st.run(`select id from t order by id`, [])).rows).toEqual([{ id: 'x' }]);
  });

  it('runs control statements and DDL as simple queries, and a parameterised one through PGlite', async () => {
    const { st } = await setup();
    await st.run(`create table u (k int)`, []);
    await st.run(`insert into u values ($1)`, [7]);
    expect((await st.run(`select * from u where k = $1`, [7])).rows).toEqual([{ k: 7 }]);
    await st.run('begin', []);
    await st.run('commit', []);
    expect(await preparedCount(db!)).toBe(2); // transaction control keeps the statements
    await st.run(`alter table u add column v int default 3`, []);
    // After DDL the same text answers with the new shape (kept statements were dropped).
    expect(await preparedCount(db!)).toBe(0);
    expect((await st.run(`select * from u where k = $1`, [7])).rows).toEqual([{ k: 7, v: 3 }]);
  });
});
