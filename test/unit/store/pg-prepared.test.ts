/**
 * Named prepared statements on PostgreSQL: only registered texts go under a name; every other
 * query reaches the client exactly as it was sent. The client here records what it is given.
 */
import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import { namePreparedStatements, prepared } from '../../../src/store/pg-prepared.js';

function recordingClient() {
  const calls: unknown[][] = [];
  const client = { query: (...args: unknown[]) => (calls.push(args), Promise.resolve({ rows: [] })) };
  namePreparedStatements(client as unknown as pg.ClientBase);
  return { calls, query: client.query as (...args: unknown[]) => unknown };
}

describe('named prepared statements', () => {
  it('a registered text goes by one stable name with its values; others as they came', () => {
    const text = `select $1::int as hot -- ${Math.random()}`;
    const { calls, query } = recordingClient();
    query('select $1::int as cold', [1]);
    expect(calls[0]).toEqual(['select $1::int as cold', [1], undefined]);
    expect(prepared(text)).toBe(text);
    query(text, [2]);
    query(text, [3]);
    const [a, b] = [calls[1]![0], calls[2]![0]] as { name: string; text: string; values: unknown[] }[];
    expect(a).toMatchObject({ text, values: [2] });
    expect(b).toMatchObject({ text, values: [3], name: a!.name });
    expect(a!.name).toMatch(/^kici_hot_\d+$/);
    // A query config object (not a text) is never renamed.
    query({ text, values: [4] });
    expect(calls[3]).toEqual([{ text, values: [4] }, undefined, undefined]);
  });

  it('the registry is bounded: texts past the bound run unnamed', () => {
    const { calls, query } = recordingClient();
    const texts = Array.from({ length: 100 }, (_, i) => prepared(`select ${i} -- bound ${Math.random()}`));
    for (const t of texts) query(t, []);
    const named = calls.filter((c) => typeof c[0] === 'object').length;
    expect(named).toBeLessThanOrEqual(64);
    expect(typeof calls.at(-1)![0]).toBe('string');
  });
});
