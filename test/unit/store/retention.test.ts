/**
 * Retention on the embedded store: the pruner removes exactly the finished jobs older than the
 * setting (never an open one, never a recent one), in batches of any size, leaving a tombstone
 * per job; the table-driven rules keep live tokens, claims and deliveries.
 */
import fc from 'fast-check';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { JobState } from '../../../src/store/index.js';
import { isPrunableJob } from '../../../src/store/retention/job-pruner.js';
import {
  DEFAULT_RETENTION,
  formatRetention,
  parseRetention,
  retentionFromSettings,
} from '../../../src/store/retention/policy.js';
import { Pruner } from '../../../src/store/retention/pruner.js';
import { pino } from 'pino';
import { Metrics } from '../../../src/server/metrics.js';
import { RetentionService } from '../../../src/server/retention.js';
import { freshStore } from '../../helpers/data-dir.js';

let open: Awaited<ReturnType<typeof freshStore>>;
beforeAll(async () => {
  open = await freshStore();
});
afterAll(async () => {
  await open?.close();
});

const STATES: JobState[] = [
  'queued',
  'dispatched',
  'running',
  'succeeded',
  'failed',
  'cancelled',
  'timed-out',
  'no-backend',
];
const NOW = Date.parse('2026-06-01T00:00:00Z');
const RETAIN = 60_000;

interface Seed {
  state: JobState;
  /** Finished this long before NOW (null: no finish stamp). */
  agoMs: number | null;
  lines: number;
}

const seedArb = fc.record({
  state: fc.constantFrom(...STATES),
  agoMs: fc.option(fc.integer({ min: -5_000, max: 3 * RETAIN }), { nil: null }),
  lines: fc.integer({ min: 0, max: 6 }),
});

async function seed(jobs: Seed[]): Promise<string[]> {
  const db = open.db.db;
  await sql`delete from job_logs`.execute(db);
  await sql`delete from job_log_chunks`.execute(db);
  await sql`delete from step_results`.execute(db);
  await sql`delete from jobs`.execute(db);
  await sql`delete from job_tombstones`.execute(db);
  await sql`delete from runs`.execute(db);
  await db
    .insertInto('runs')
    .values({ id: 'r-prop', name: null, created_at: new Date(NOW - 10 * RETAIN) })
    .execute();
  const ids = jobs.map((_, i) => `j-prop${String(i).padStart(6, '0')}`);
  if (!jobs.length) return ids;
  await db
    .insertInto('jobs')
    .values(
      jobs.map((j, i) => ({
        id: ids[i]!,
        run_id: 'r-prop',
        name: `n${i}`,
        state: j.state,
        runs_on: '[]',
        spec: '{}',
        agent_id: null,
        exit_code: null,
        reason: null,
        last_provisioning_error: null,
        retry_of: null,
        created_at: new Date(NOW - 10 * RETAIN),
        dispatched_at: null,
        started_at: null,
        finished_at: j.agoMs === null ? null : new Date(NOW - j.agoMs),
      })),
    )
    .execute();
  const lines = jobs.flatMap((j, i) =>
    Array.from({ length: j.lines }, (_, k) => ({
      jobId: ids[i]!,
      stepIdx: 0,
      stream: 'stdout',
      line: `line ${k}`,
      ts: new Date(NOW),
    })),
  );
  await open.store.logs.append(lines);
  for (const [i, j] of jobs.entries())
    if (j.lines) await open.store.logs.stepStarted(ids[i]!, 0, 's', new Date(NOW));
  return ids;
}

describe('job pruning', () => {
  it('removes every finished job older than the setting and nothing else, whatever the batch size', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(seedArb, { maxLength: 25 }),
        fc.integer({ min: 1, max: 8 }),
        async (jobs, batch) => {
          const ids = await seed(jobs);
          const cutoff = new Date(NOW - RETAIN);
          const pruner = new Pruner({
            db: open.db.db,
            policy: { ...DEFAULT_RETENTION, jobsMs: RETAIN, batchRows: batch },
            now: () => NOW,
          });
          const expectGone = jobs.map((j) =>
            isPrunableJob(
              { state: j.state, finished_at: j.agoMs === null ? null : new Date(NOW - j.agoMs) },
              cutoff,
            ),
          );
          const dry = await pruner.run({ dryRun: true });
          expect(dry.tables.jobs).toBe(expectGone.filter(Boolean).length);
          const report = await pruner.run();
          expect(report.tables.jobs).toBe(dry.tables.jobs);
          expect(report.tables.job_log_chunks ?? 0).toBe(dry.tables.job_log_chunks);
          // Step rows go with their jobs, and are counted, so the embedded store vacuums them too.
          expect(report.tables.step_results ?? 0).toBe(dry.tables.step_results ?? 0);
          const left = new Set((await open.db.db.selectFrom('jobs').select('id').execute()).map((r) => r.id));
          const tomb = new Set(
            (
              await sql<{ id: string }>`select id from job_tombstones where logs_pruned`.execute(open.db.db)
            ).rows.map((r) => r.id),
          );
          const logJobs = new Set(
            (
              await sql<{ job_id: string }>`select distinct job_id from job_log_chunks`.execute(open.db.db)
            ).rows.map((r) => r.job_id),
          );
          for (const [i, id] of ids.entries()) {
            expect(left.has(id)).toBe(!expectGone[i]);
            expect(tomb.has(id)).toBe(expectGone[i]);
            expect(logJobs.has(id)).toBe(!expectGone[i] && jobs[i]!.lines > 0);
            if (!expectGone[i]) expect(await open.store.logs.list(id)).toHaveLength(jobs[i]!.lines);
          }
          // Nothing left to do: a second run removes nothing.
          expect((await pruner.run()).total).toBe(0);
        },
      ),
      { numRuns: 25 },
    );
  });

  it('never selects an open job, however old its stamps (pure rule)', () => {
    fc.assert(
      fc.property(fc.constantFrom(...STATES), fc.integer({ min: 0, max: 1e12 }), (state, finished) => {
        const open = ['queued', 'dispatched', 'running'].includes(state);
        if (open)
          expect(isPrunableJob({ state, finished_at: new Date(finished) }, new Date(2e12))).toBe(false);
      }),
    );
  });

  it('a run goes with its last job; a pruned job keeps a tombstone until its own retention', async () => {
    await seed([{ state: 'succeeded', agoMs: 2 * RETAIN, lines: 2 }]);
    const pruner = new Pruner({
      db: open.db.db,
      policy: { ...DEFAULT_RETENTION, jobsMs: RETAIN, tombstonesMs: 5 * RETAIN },
      now: () => NOW,
    });
    const r = await pruner.run();
    expect(r.tables).toMatchObject({ jobs: 1, job_log_chunks: 1, runs: 1, job_tombstones: 0 });
    expect(await pruner.tombstone('j-prop000000')).toMatchObject({ state: 'succeeded', name: 'n0' });
    const later = new Pruner({
      db: open.db.db,
      policy: { ...DEFAULT_RETENTION, jobsMs: RETAIN, tombstonesMs: 5 * RETAIN },
      now: () => NOW + 6 * RETAIN,
    });
    expect((await later.run()).tables.job_tombstones).toBe(1);
    expect(await pruner.tombstone('j-prop000000')).toBeUndefined();
  });
});

describe('retention on the embedded store', () => {
  it('vacuums the tables it pruned, which nothing else does there', async () => {
    await seed([{ state: 'succeeded', agoMs: 2 * RETAIN, lines: 2 }]);
    const vacuums = async (table = 'jobs') =>
      Number(
        (
          await sql<{ n: string }>`select pg_stat_get_vacuum_count(${table}::regclass) as n`.execute(
            open.db.db,
          )
        ).rows[0]!.n,
      );
    const before = await vacuums();
    // Step rows are deleted with their jobs: a table left out here grew through a whole soak.
    const stepsBefore = await vacuums('step_results');
    const service = new RetentionService(
      open.db.db,
      open.db.engine,
      { ...DEFAULT_RETENTION, jobsMs: RETAIN },
      () => NOW,
      new Metrics(),
      pino({ level: 'silent' }),
    );
    const r = await service.prune(false);
    expect(r.tables.jobs).toBe(1);
    expect(r.tables.step_results).toBe(1);
    expect(await vacuums()).toBeGreaterThan(before);
    expect(await vacuums('step_results')).toBeGreaterThan(stepsBefore);
  });
});

describe('table rules', () => {
  it('drops expired and revoked tokens and used claims past the setting, keeps live ones and admin tokens', async () => {
    const db = open.db.db;
    const old = new Date(NOW - 2 * RETAIN);
    const token = (
      id: string,
      kind: 'static' | 'ephemeral' | 'admin',
      expires: Date | null,
      revoked: Date | null,
    ) => ({
      id,
      token_hash: `h-${id}`,
      agent_id: `a-${id}`,
      labels: '[]',
      kind,
      expires_at: expires,
      revoked_at: revoked,
      created_at: old,
    });
    await db
      .insertInto('agent_tokens')
      .values([
        token('expired', 'ephemeral', old, null),
        token('revoked', 'static', null, old),
        token('live', 'static', new Date(NOW + RETAIN), null),
        token('recent', 'ephemeral', new Date(NOW - 1000), null),
        token('admin', 'admin', old, null),
      ])
      .execute();
    const claim = (hash: string, expires: Date, consumed: Date | null) => ({
      claim_hash: hash,
      claim_prefix: hash.slice(0, 12),
      agent_id: `a-${hash}`,
      scaler_name: 's',
      labels: '[]',
      agent_token_ttl_ms: 1000,
      orchestrator_url: 'ws://x',
      expires_at: expires,
      consumed_at: consumed,
    });
    await db
      .insertInto('scaler_pending_claims')
      .values([
        claim('used-old', new Date(NOW + RETAIN), old),
        claim('pending', new Date(NOW + RETAIN), null),
      ])
      .execute();
    const pruner = new Pruner({ db, policy: { ...DEFAULT_RETENTION, tokensMs: RETAIN }, now: () => NOW });
    const dry = await pruner.run({ dryRun: true });
    expect(dry.tables).toMatchObject({ agent_tokens: 2, scaler_pending_claims: 1 });
    await pruner.run();
    const tokens = (await db.selectFrom('agent_tokens').select('id').execute()).map((r) => r.id).sort();
    expect(tokens).toEqual(['admin', 'live', 'recent']);
    const claims = (await db.selectFrom('scaler_pending_claims').select('claim_hash').execute()).map(
      (r) => r.claim_hash,
    );
    expect(claims).toEqual(['pending']);
  });

  it('drops spawn times past the spawns setting once their agent is gone, keeps recent and live ones', async () => {
    const db = open.db.db;
    const old = new Date(NOW - 2 * RETAIN);
    const row = (id: string, decided: Date) => ({
      agent_id: id,
      scaler_name: 's',
      backend_type: 'bare-metal',
      label_set: 'linux',
      bound_job_id: null,
      decided_at: decided,
    });
    await db
      .insertInto('scaler_spawn_times')
      .values([row('old', old), row('recent', new Date(NOW - 1000)), row('old-live', old)])
      .execute();
    await db
      .insertInto('scaler_spawning_agents')
      .values({
        agent_id: 'old-live',
        scaler_name: 's',
        backend_type: 'bare-metal',
        label_set: '[]',
        run_id: null,
        bound_job_id: null,
        owner_instance_id: 'i',
        backend_ref: null,
        mandatory_labels: '[]',
        spawned_at: old,
      })
      .execute();
    const pruner = new Pruner({ db, policy: { ...DEFAULT_RETENTION, spawnsMs: RETAIN }, now: () => NOW });
    await pruner.run();
    const left = (await db.selectFrom('scaler_spawn_times').select('agent_id').execute()).map(
      (r) => r.agent_id,
    );
    expect(left.sort()).toEqual(['old-live', 'recent']);
    await db.deleteFrom('scaler_spawning_agents').execute();
    await db.deleteFrom('scaler_spawn_times').execute();
  });

  it('skips an optional table that does not exist, and off keeps a kind forever', async () => {
    const pruner = new Pruner({
      db: open.db.db,
      policy: { ...DEFAULT_RETENTION, auditMs: 1, tokensMs: null },
      now: () => NOW,
    });
    const r = await pruner.run({ dryRun: true });
    expect(r.tables.audit).toBeUndefined();
    expect(r.tables.agent_tokens).toBeUndefined();
  });
});

describe('settings', () => {
  it('parses durations and names the setting in errors', () => {
    expect(parseRetention('30d', 'x')).toBe(30 * 86_400_000);
    expect(parseRetention('90', 'x')).toBe(90_000);
    expect(parseRetention('off', 'x')).toBeNull();
    expect(() => parseRetention('soon', '--retain-jobs')).toThrow(/--retain-jobs: expected a duration/);
    expect(formatRetention(14 * 86_400_000)).toBe('2w');
    expect(formatRetention(null)).toBe('off');
    const p = retentionFromSettings({ jobsMs: '2s' }, { KICI_RETAIN_EVENTS: '1h', KICI_RETAIN_JOBS: '9d' });
    expect(p.jobsMs).toBe(2000);
    expect(p.eventsMs).toBe(3_600_000);
    expect(p.tokensMs).toBe(DEFAULT_RETENTION.tokensMs);
    expect(() => retentionFromSettings({}, { KICI_PRUNE_INTERVAL: 'off' })).toThrow(/KICI_PRUNE_INTERVAL/);
  });
});
