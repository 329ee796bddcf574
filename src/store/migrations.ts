import { Migrator, sql, type Kysely, type Migration, type MigrationProvider } from 'kysely';

/**
 * One set of migrations for both engines (PGlite and PostgreSQL). They are code, not files, so the
 * built package carries them and nothing is read from disk at start-up.
 */
const migrations: Record<string, Migration> = {
  '001_core': {
    async up(db: Kysely<unknown>) {
      await sql`
        create table runs (
          id text primary key,
          name text,
          created_at timestamptz not null default now()
        )`.execute(db);
      await sql`
        create table jobs (
          id text primary key,
          run_id text not null references runs(id),
          name text not null,
          seq bigserial not null,
          state text not null,
          runs_on jsonb not null,
          spec jsonb not null,
          agent_id text,
          exit_code integer,
          reason text,
          last_provisioning_error text,
          attempts integer not null default 0,
          created_at timestamptz not null default now(),
          dispatched_at timestamptz,
          started_at timestamptz,
          finished_at timestamptz
        )`.execute(db);
      await sql`create index jobs_state_seq on jobs (state, seq)`.execute(db);
      await sql`create index jobs_run on jobs (run_id)`.execute(db);
      await sql`
        create table step_results (
          job_id text not null references jobs(id),
          idx integer not null,
          name text not null,
          exit_code integer,
          timed_out boolean not null default false,
          started_at timestamptz not null default now(),
          finished_at timestamptz,
          primary key (job_id, idx)
        )`.execute(db);
      await sql`
        create table job_logs (
          id bigserial primary key,
          job_id text not null,
          step_idx integer,
          stream text not null,
          line text not null,
          ts timestamptz not null default now()
        )`.execute(db);
      await sql`create index job_logs_job on job_logs (job_id, id)`.execute(db);
      await sql`
        create table agents (
          id text primary key,
          kind text not null,
          labels jsonb not null,
          scaler_name text,
          state text not null,
          hostname text,
          version text,
          connected_at timestamptz not null default now(),
          last_seen_at timestamptz not null default now(),
          disconnected_at timestamptz
        )`.execute(db);
      await sql`
        create table agent_tokens (
          id text primary key,
          token_hash text not null unique,
          agent_id text not null,
          labels jsonb not null,
          kind text not null,
          expires_at timestamptz,
          created_at timestamptz not null default now(),
          revoked_at timestamptz
        )`.execute(db);
      await sql`create index agent_tokens_agent on agent_tokens (agent_id)`.execute(db);
      await sql`
        create table scaler_spawning_agents (
          agent_id text primary key,
          scaler_name text not null,
          backend_type text not null,
          label_set jsonb not null,
          run_id text,
          bound_job_id text,
          owner_instance_id text,
          backend_ref text,
          mandatory_labels jsonb not null default '[]',
          spawned_at timestamptz not null default now(),
          registered_at timestamptz,
          adopted_by text,
          adopted_at timestamptz
        )`.execute(db);
      await sql`create index scaler_spawning_owner on scaler_spawning_agents (owner_instance_id)`.execute(db);
      await sql`
        create table scaler_reservations (
          agent_id text primary key,
          scaler_name text not null,
          cpu_units double precision not null default 0,
          mem_bytes bigint not null default 0,
          owner_instance_id text,
          reserved_at timestamptz not null default now()
        )`.execute(db);
      await sql`
        create table scaler_agent_jobs (
          agent_id text primary key,
          run_id text not null,
          job_id text not null,
          correlated_at timestamptz not null default now()
        )`.execute(db);
    },
  },
  /** Job logs over the per-job cap keep their head and tail; the job says its log was cut. */
  '002_log_cap_and_probe': {
    async up(db: Kysely<unknown>) {
      await sql`alter table jobs add column log_truncated boolean not null default false`.execute(db);
      // One row, rewritten by the readiness probe to prove the store still takes writes.
      await sql`
        create table kici_probe (
          id integer primary key,
          checked_at timestamptz not null default now()
        )`.execute(db);
    },
  },
  /** `job retry` adds a new job row to the same run: which attempt it is, and the job it retries. */
  '003_job_retry': {
    async up(db: Kysely<unknown>) {
      await sql`alter table jobs add column attempt integer not null default 1`.execute(db);
      await sql`alter table jobs add column retry_of text`.execute(db);
    },
  },
  /** `kici-admin agent token list` shows when each token last let an agent in. */
  '004_token_last_used': {
    async up(db: Kysely<unknown>) {
      await sql`alter table agent_tokens add column last_used_at timestamptz`.execute(db);
    },
  },
  /** Micro-VM IP leases: one row per live VM, so a restarted orchestrator never hands an address out twice. */
  '005_vm_ip_allocations': {
    async up(db: Kysely<unknown>) {
      await sql`
        create table ip_allocations (
          ip text primary key,
          vm_id text not null unique,
          scaler_name text not null,
          tap_device text not null,
          mac_address text not null,
          allocated_at timestamptz not null default now()
        )`.execute(db);
    },
  },
};

const provider: MigrationProvider = { getMigrations: async () => migrations };

export async function migrateToLatest(db: Kysely<unknown>): Promise<void> {
  const migrator = new Migrator({
    db,
    provider,
    migrationTableName: 'kici_migrations',
    migrationLockTableName: 'kici_migrations_lock',
  });
  const { error, results } = await migrator.migrateToLatest();
  const failed = results?.find((r) => r.status === 'Error');
  if (error || failed) {
    throw new Error(`database migration failed${failed ? ` at ${failed.migrationName}` : ''}`, {
      cause: error,
    });
  }
}
