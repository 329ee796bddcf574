/**
 * Hot path: the wake-up trigger on job updates (migration 010) fires for every update that leaves a
 * row queued (a requeue, a released scale claim), and not for claims and results, which no longer
 * pay for it. Real PGlite on a migrated data dir, listening on the channel. The embedded store
 * itself keeps these triggers disabled (one instance, nobody listening): here they are turned back
 * on, as PostgreSQL runs them, and the last case checks that an opened embedded store has them off.
 */
import { PGlite } from '@electric-sql/pglite';
import { sql } from 'kysely';
import { rm } from 'node:fs/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { QUEUED_CHANNEL } from '../../../src/cluster/queue-sync.js';
import { freshDataDir, memoryDatabase } from '../../helpers/data-dir.js';

let pg: PGlite;
let dir: string;
const heard: string[] = [];
const payloads: string[] = [];
beforeAll(async () => {
  dir = await freshDataDir();
  pg = new PGlite(`${dir}/pg`);
  await pg.waitReady;
  await pg.exec('alter table jobs enable trigger all');
  await pg.listen(QUEUED_CHANNEL, (payload) => {
    heard.push('queued');
    payloads.push(payload);
  });
}, 60_000);
afterAll(async () => {
  await pg.close();
  await rm(dir, { recursive: true, force: true });
});

/** Run one statement, let notifications arrive, and say how many were heard. */
async function notifications(statement: string): Promise<number> {
  heard.length = 0;
  payloads.length = 0;
  await pg.exec(statement);
  await new Promise((r) => setTimeout(r, 50));
  return heard.length;
}

describe('queued wake-up trigger', () => {
  it('fires on insert and on an update that leaves rows queued, not on claims and results', async () => {
    await pg.exec(`insert into runs (id) values ('r-notify')`);
    expect(
      await notifications(
        `insert into jobs (id, run_id, name, state, runs_on, spec) values
           ('j-n1', 'r-notify', 'a', 'queued', '[]', '{}'), ('j-n2', 'r-notify', 'b', 'queued', '[]', '{}')`,
      ),
    ).toBeGreaterThan(0);
    // A claim (queued → dispatched) and a result: nothing to wake anyone for.
    expect(
      await notifications(`update jobs set state = 'dispatched', agent_id = 'x' where id = 'j-n1'`),
    ).toBe(0);
    expect(await notifications(`update jobs set state = 'succeeded' where id = 'j-n1'`)).toBe(0);
    // A row left queued (a released scale claim) and a requeue: peers must look again.
    expect(await notifications(`update jobs set scale_owner = null where id = 'j-n2'`)).toBeGreaterThan(0);
    await pg.exec(`update jobs set state = 'dispatched', agent_id = 'x' where id = 'j-n2'`);
    expect(
      await notifications(`update jobs set state = 'queued', agent_id = null where id = 'j-n2'`),
    ).toBeGreaterThan(0);
  });

  it('says what changed: the lowest place a statement queued from, or the job queued again', async () => {
    await pg.exec(`insert into runs (id) values ('r-payload')`);
    await notifications(
      `insert into jobs (id, run_id, name, state, runs_on, spec) values
         ('j-p1', 'r-payload', 'a', 'queued', '[]', '{}'), ('j-p2', 'r-payload', 'b', 'queued', '[]', '{}')`,
    );
    const low = await pg.query<{ s: string }>(
      `select min(seq)::text as s from jobs where run_id = 'r-payload'`,
    );
    expect(payloads).toEqual([`from:${low.rows[0]!.s}`]);
    await pg.exec(`update jobs set state = 'dispatched', agent_id = 'x' where id = 'j-p2'`);
    await notifications(`update jobs set state = 'queued', agent_id = null where id = 'j-p2'`);
    expect(payloads).toEqual(['job:j-p2']);
  });

  it('an opened embedded store keeps the wake-up triggers disabled, and only those', async () => {
    const opened = await memoryDatabase();
    try {
      const r = await sql<{ tgname: string; tgenabled: string }>`
        select tgname, tgenabled from pg_trigger
         where tgrelid = 'jobs'::regclass and not tgisinternal order by tgname`.execute(opened.db);
      expect(r.rows).toEqual([
        { tgname: 'jobs_notify_queued_insert', tgenabled: 'D' },
        { tgname: 'jobs_notify_queued_update_row', tgenabled: 'D' },
      ]);
    } finally {
      await opened.close();
    }
  });

  it('the newest-first job list has an index to read from', async () => {
    const r = await pg.query<{ indexdef: string }>(
      `select indexdef from pg_indexes where indexname = 'jobs_seq'`,
    );
    expect(r.rows[0]?.indexdef).toMatch(/\(seq\)/);
  });
});
