import pg from 'pg';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createStore, openDatabase } from '../../src/store/index.js';
import {
  bareMetalConfig,
  eventually,
  scalerIdle,
  startTestOrchestrator,
  type TestOrchestrator,
} from '../helpers/orchestrator.js';
import { describeStoreContract } from '../helpers/store-contract.js';
import { freshTestDatabase } from '../helpers/pg-database.js';

const ADMIN_URL = process.env.KICI_TEST_DATABASE_URL;

/** A fresh database per test, on the system tier's PostgreSQL. */
/** A database of its own on the system tier's PostgreSQL (pg-database.ts), by its URL. */
const freshDatabaseUrl = async (): Promise<string> => (await freshTestDatabase('kici')).url;

beforeAll(async () => {
  // Fail loudly (never skip) when the service is missing.
  const client = new pg.Client({ connectionString: ADMIN_URL ?? 'postgres://missing' });
  await client.connect();
  await client.end();
});

describeStoreContract('PostgreSQL', async () => {
  const db = await openDatabase({ url: await freshDatabaseUrl() });
  return { store: createStore(db.db), close: () => db.close() };
});

describe('orchestrator on external PostgreSQL', () => {
  let t: TestOrchestrator | undefined;
  afterEach(async () => {
    await t?.stop();
    t = undefined;
  });

  it('migrations are idempotent across two opens', async () => {
    const url = await freshDatabaseUrl();
    const a = await openDatabase({ url });
    const b = await openDatabase({ url });
    expect(a.engine).toBe('postgres');
    await Promise.all([a.close(), b.close()]);
  });

  it('runs autoscaled bare-metal jobs end to end with the same migrations', async () => {
    t = await startTestOrchestrator({ databaseUrl: await freshDatabaseUrl(), config: bareMetalConfig() });
    const run = await t.api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
      jobs: {
        a: { runsOn: ['linux', 'small'], steps: [{ run: 'echo pg-a' }] },
        b: { runsOn: ['linux', 'large'], steps: [{ run: 'exit 5' }] },
      },
    });
    const [a, b] = await Promise.all(run.body.jobs.map((j) => t!.waitForJob(j.id)));
    expect(a!.state).toBe('succeeded');
    expect(b!.state).toBe('failed');
    expect(b!.exitCode).toBe(5);
    await eventually(() => scalerIdle(t!.orch.scaler!), 10_000, 'agents gone');
    const logs = await t.api<{ lines: { line: string }[] }>('GET', `/api/v1/jobs/${a!.id}/logs`);
    expect(logs.body.lines.map((l) => l.line)).toContain('pg-a');
  });
});

describe('claims racing on PostgreSQL', () => {
  it('a planned job another transaction holds but leaves queued is waited for and taken, not passed over', async () => {
    const url = await freshDatabaseUrl();
    const db = await openDatabase({ url });
    const store = createStore(db.db);
    const peer = new pg.Client({ connectionString: url });
    await peer.connect();
    try {
      const now = new Date();
      await store.jobs.insertRun(
        { id: 'r-lock', name: null },
        ['l-0', 'l-1', 'l-2'].map((id) => ({ id, name: id, runsOn: ['x'], spec: {} })),
        now,
      );
      // A peer's scale claim in flight: the row is held, and stays queued.
      await peer.query('begin');
      await peer.query(`update jobs set scale_owner = 'peer' where id = 'l-0'`);
      const claim = store.jobs.claimMany([{ jobId: 'l-0', agentId: 'mine', alts: ['l-1', 'l-2'] }], now);
      let settled = false;
      void claim.finally(() => (settled = true));
      // The claim's statement is waiting on the row before the peer lets go of it (a claim that
      // passed over the row settles instead, and fails below).
      while (!settled) {
        const { rows } = await peer.query<{ n: string }>(
          `select count(*) as n from pg_stat_activity
            where datname = current_database() and wait_event_type = 'Lock' and pid <> pg_backend_pid()`,
        );
        if (Number(rows[0]!.n) > 0) break;
      }
      await peer.query('commit');
      expect([...(await claim).keys()]).toEqual(['l-0']);
      const rows = await Promise.all(['l-0', 'l-1', 'l-2'].map((id) => store.jobs.get(id)));
      expect(rows.map((r) => [r!.state, r!.agent_id])).toEqual([
        ['dispatched', 'mine'],
        ['queued', null],
        ['queued', null],
      ]);
    } finally {
      await peer.end();
      await db.close();
    }
  });
});
