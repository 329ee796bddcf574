import { gunzipSync } from 'node:zlib';
import { sql, type Kysely } from 'kysely';

/**
 * Every row of every table of a store as one text, for a test that looks for a string that must
 * not be stored anywhere. Binary columns (compressed log chunks) are unpacked first, so a value
 * inside them is found too.
 */
export async function databaseText(db: Kysely<unknown>): Promise<string> {
  const tables = await sql<{ table_name: string }>`
    select table_name from information_schema.tables
    where table_schema = current_schema() and table_type = 'BASE TABLE'`.execute(db);
  const parts: string[] = [];
  for (const { table_name } of tables.rows) {
    const rows = await sql<Record<string, unknown>>`select * from ${sql.table(table_name)}`.execute(db);
    for (const row of rows.rows)
      parts.push(`${table_name}: ${JSON.stringify(row, (_k, v: unknown) => (isBytes(v) ? unpack(v) : v))}`);
  }
  return parts.join('\n');
}

function isBytes(v: unknown): v is Uint8Array {
  return v instanceof Uint8Array;
}

function unpack(v: Uint8Array): string {
  const b = Buffer.from(v);
  return b[0] === 0x1f && b[1] === 0x8b ? gunzipSync(b).toString('utf8') : b.toString('utf8');
}
