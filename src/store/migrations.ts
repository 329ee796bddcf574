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
  /** Event scaler: claim codes (hash only) and the delivery record of every scale event. */
  '005_event_claims_and_deliveries': {
    async up(db: Kysely<unknown>) {
      await sql`
        create table scaler_pending_claims (
          claim_hash text primary key,
          claim_prefix text not null,
          agent_id text not null,
          scaler_name text not null,
          labels jsonb not null,
          agent_token_ttl_ms bigint not null,
          orchestrator_url text not null,
          expires_at timestamptz not null,
          consumed_at timestamptz,
          created_at timestamptz not null default now()
        )`.execute(db);
      await sql`create index scaler_pending_claims_agent on scaler_pending_claims (agent_id)`.execute(db);
      await sql`create index scaler_pending_claims_expiry on scaler_pending_claims (expires_at)`.execute(db);
      await sql`
        create table scaler_event_deliveries (
          event_id text not null,
          target text not null,
          event_name text not null,
          scaler_name text not null,
          agent_id text not null,
          reason text,
          payload jsonb not null,
          state text not null,
          attempts integer not null default 0,
          last_error text,
          job_id text,
          created_at timestamptz not null default now(),
          updated_at timestamptz not null default now(),
          primary key (event_id, target)
        )`.execute(db);
      await sql`create index scaler_event_deliveries_agent on scaler_event_deliveries (agent_id)`.execute(db);
    },
  },
  /**
   * Clustering: every orchestrator on one database heartbeats a row here. Times are the database's
   * own clock, so hosts with skewed clocks still agree on who is late.
   */
  '006_cluster_instances': {
    async up(db: Kysely<unknown>) {
      await sql`
        create table kici_instances (
          id text primary key,
          address text not null,
          version text not null,
          heartbeat_ms integer not null,
          started_at timestamptz not null default now(),
          last_heartbeat timestamptz not null default now(),
          agents_connected integer not null default 0,
          jobs_running integer not null default 0,
          leader boolean not null default false,
          stopped_at timestamptz
        )`.execute(db);
    },
  },
  /**
   * Shared queue: a statement that leaves a job queued (a submit, a requeue) wakes every instance
   * listening on `kici_jobs_queued`; identical notifications in one transaction fold into one.
   * `scale_owner` is the instance that claimed the job for scaling: only it spawns.
   */
  '007_cluster_queue': {
    async up(db: Kysely<unknown>) {
      await sql`alter table jobs add column scale_owner text`.execute(db);
      // The instance that dispatched the job: only it (or, once it is dead, the leader) settles it.
      await sql`alter table jobs add column owner_instance text`.execute(db);
      // What each instance's scalers can provision for, so a peer does not judge a job "no backend".
      await sql`alter table kici_instances add column scale_label_sets jsonb not null default '[]'`.execute(
        db,
      );
      await sql`
        create function kici_notify_queued() returns trigger language plpgsql as $$
        begin
          if exists (select 1 from changed where state = 'queued') then
            perform pg_notify('kici_jobs_queued', '');
          end if;
          return null;
        end $$`.execute(db);
      for (const op of ['insert', 'update'])
        await sql
          .raw(
            `create trigger jobs_notify_queued_${op} after ${op} on jobs
               referencing new table as changed for each statement
               execute function kici_notify_queued()`,
          )
          .execute(db);
    },
  },
  /** Reload fan-out: one request row per `scaler reload`, one result row per instance. */
  '008_cluster_reload': {
    async up(db: Kysely<unknown>) {
      await sql`
        create table kici_reload_requests (
          id bigserial primary key,
          requested_by text not null,
          requested_at timestamptz not null default now()
        )`.execute(db);
      await sql`
        create table kici_reload_results (
          request_id bigint not null,
          instance_id text not null,
          result text not null,
          problems jsonb not null default '[]',
          answered_at timestamptz not null default now(),
          primary key (request_id, instance_id)
        )`.execute(db);
    },
  },
  /** Micro-VM IP leases: one row per live VM, so a restarted orchestrator never hands an address out twice. */
  '009_vm_ip_allocations': {
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
  /**
   * Cross-instance adoption of event provisions: the spawn row carries the targets its scale-down
   * goes to, and an outcome row remembers who adopted a provision after its row is gone.
   */
  '010_event_adoption': {
    async up(db: Kysely<unknown>) {
      await sql`alter table scaler_spawning_agents add column provisioning_targets jsonb`.execute(db);
      await sql`
        create table scaler_provision_outcomes (
          agent_id text primary key,
          scaler_name text not null,
          adopted_by text,
          adopted_at timestamptz,
          condemned_reason text,
          condemned_at timestamptz,
          recorded_at timestamptz not null default now(),
          updated_at timestamptz not null default now()
        )`.execute(db);
      await sql`create index scaler_provision_outcomes_updated on scaler_provision_outcomes (updated_at)`.execute(
        db,
      );
    },
  },
  /**
   * Cluster reconnects and cancels: each agents row names the instance its socket is on, so a
   * starting instance marks only its own agents gone; a cancel sent to an instance that does not
   * hold the job is left on the row for its owner (woken by NOTIFY `kici_job_cancel`).
   */
  '011_cluster_reconnect_cancel': {
    async up(db: Kysely<unknown>) {
      await sql`alter table agents add column instance_id text`.execute(db);
      await sql`alter table jobs add column cancel_requested_at timestamptz`.execute(db);
      await sql`alter table jobs add column cancel_reason text`.execute(db);
    },
  },
  /**
   * Hot path: the statement trigger on job updates ran PL/pgSQL over a transition table for every
   * claim and result, to find the rare row left queued. A row trigger whose WHEN clause is checked
   * by the executor itself costs nothing for the rows that leave the queue, and still raises the
   * wake-up for every update that leaves a row queued (a requeue, a released scale claim).
   */
  '012_hot_path_notify': {
    async up(db: Kysely<unknown>) {
      await sql`drop trigger jobs_notify_queued_update on jobs`.execute(db);
      await sql`
        create function kici_notify_queued_row() returns trigger language plpgsql as $$
        begin
          perform pg_notify('kici_jobs_queued', '');
          return null;
        end $$`.execute(db);
      await sql`
        create trigger jobs_notify_queued_update_row after update on jobs
          for each row when (new.state = 'queued') execute function kici_notify_queued_row()`.execute(db);
    },
  },
  /**
   * Hot path: the step rows' foreign key ran a row lock on the job for every step row, and the
   * job's own result update in the same statement then had to record two lockers of one row (a
   * multixact, written to its own files). Step rows are written only for a job the writing agent
   * holds, and jobs are never deleted, so the key guarded nothing the code does not.
   */
  '013_step_rows_unkeyed': {
    async up(db: Kysely<unknown>) {
      await sql`alter table step_results drop constraint if exists step_results_job_id_fkey`.execute(db);
    },
  },
  /**
   * Agent sessions: the hash of the secret an agent was given at registration, which its reconnects
   * must present, and how many jobs it was handed. Both are the server's: an agent's own word on
   * either is never trusted, and a restart of the orchestrator must not forget them.
   */
  '014_agent_sessions': {
    async up(db: Kysely<unknown>) {
      await sql`
        create table agent_sessions (
          agent_id text primary key,
          secret_hash text not null,
          jobs_taken integer not null default 0,
          opened_at timestamptz not null default now()
        )`.execute(db);
    },
  },
  /**
   * Operator access: tokens with a role, kept as SHA-256 hashes so that every instance sharing the
   * database accepts every token; and the audit trail of mutating and refused admin calls.
   */
  '015_access_tokens_audit': {
    async up(db: Kysely<unknown>) {
      await sql`
        create table access_tokens (
          id text primary key,
          name text not null,
          role text not null,
          token_hash text not null unique,
          bootstrap boolean not null default false,
          created_by text,
          created_at timestamptz not null default now(),
          expires_at timestamptz,
          revoked_at timestamptz,
          last_used_at timestamptz
        )`.execute(db);
      await sql`create unique index access_tokens_live_name on access_tokens (name) where revoked_at is null`.execute(
        db,
      );
      await sql`
        create table admin_audit (
          id bigserial primary key,
          at timestamptz not null default now(),
          token_id text,
          token_name text,
          role text,
          action text not null,
          target text,
          result text not null,
          status integer not null,
          remote text
        )`.execute(db);
      await sql`create index admin_audit_at on admin_audit (at)`.execute(db);
    },
  },
  /**
   * Retention: a pruned job leaves a tombstone (so asking for it answers "pruned", not "not
   * found"); its log rows are deleted in batches after it, and `logs_pruned` marks when that is
   * done. Indexes serve the pruner's age scans. Job output is stored in chunks from here on.
   */
  '017_retention_log_chunks': {
    async up(db: Kysely<unknown>) {
      await sql`
        create table job_tombstones (
          id text primary key,
          run_id text not null,
          name text not null,
          state text not null,
          finished_at timestamptz,
          pruned_at timestamptz not null default now(),
          logs_pruned boolean not null default false
        )`.execute(db);
      await sql`create index job_tombstones_logs on job_tombstones (id) where not logs_pruned`.execute(db);
      await sql`create index jobs_finished on jobs (finished_at) where finished_at is not null`.execute(db);
      await sql`create index scaler_event_deliveries_updated on scaler_event_deliveries (updated_at)`.execute(
        db,
      );
      await sql`create index agents_gone on agents (disconnected_at) where state = 'gone'`.execute(db);
      // Compact logs: a job's output in chunks (log-chunks.ts). Chunk ids come from the sequence
      // of the old per-line rows, which stay readable: every chunk line sorts after them.
      await sql`
        create table job_log_chunks (
          id bigint primary key default nextval('job_logs_id_seq'),
          job_id text not null,
          lines integer not null,
          data bytea not null
        )`.execute(db);
      await sql`create index job_log_chunks_job on job_log_chunks (job_id, id)`.execute(db);
    },
  },
  /**
   * A provision's end as the leader's reaper decided it: who condemned it (so a new leader does
   * not send a second scale-down while the first attempt is recent) and how often it was tried.
   */
  '018_provision_outcomes': {
    async up(db: Kysely<unknown>) {
      await sql`alter table scaler_provision_outcomes add column condemned_by text`.execute(db);
      await sql`alter table scaler_provision_outcomes add column reap_attempts integer not null default 0`.execute(
        db,
      );
    },
  },
  /** Dispatch priority and the owning team (fair share), kept so a restart queues jobs as before. */
  '024_job_priority': {
    async up(db: Kysely<unknown>) {
      await sql`alter table jobs add column priority integer not null default 0`.execute(db);
      await sql`alter table jobs add column owner text`.execute(db);
    },
  },
  /**
   * Settings an admin changes for every orchestrator on this database at once; a missing row means
   * each instance uses its own flag, variable or default.
   */
  '025_cluster_settings': {
    async up(db: Kysely<unknown>) {
      await sql`create table cluster_settings (
        key text primary key,
        value bigint not null,
        updated_at timestamptz not null default now(),
        updated_by text
      )`.execute(db);
    },
  },
  /**
   * One cluster view: each instance publishes its own part (scaler status, diagnose rows, the agents
   * connected to it) with its heartbeat, so whichever instance answers can show every instance's part.
   */
  '026_cluster_view': {
    async up(db: Kysely<unknown>) {
      await sql`alter table kici_instances add column part jsonb`.execute(db);
    },
  },
  /**
   * `kici-admin scaler reset-backoff` for every instance: the instance asked writes the order, each
   * live instance lifts the backoff in its own memory and writes what it lifted.
   */
  '027_backoff_resets': {
    async up(db: Kysely<unknown>) {
      await sql`
        create table kici_backoff_resets (
          id bigserial primary key,
          scaler text not null,
          label_set text,
          requested_by text,
          via text not null,
          requested_at timestamptz not null
        )`.execute(db);
      await sql`
        create table kici_backoff_reset_results (
          request_id bigint not null,
          instance_id text not null,
          cleared jsonb not null default '[]',
          answered_at timestamptz not null default now(),
          primary key (request_id, instance_id)
        )`.execute(db);
    },
  },
  /**
   * Each provision's decision, registration and end, kept after its spawn row is gone: the spawn
   * and release latencies a trace carries.
   */
  '028_spawn_times': {
    async up(db: Kysely<unknown>) {
      await sql`
        create table scaler_spawn_times (
          agent_id text primary key,
          scaler_name text not null,
          backend_type text not null,
          label_set text not null,
          bound_job_id text,
          decided_at timestamptz not null,
          registered_at timestamptz,
          gone_at timestamptz
        )`.execute(db);
      await sql`create index scaler_spawn_times_decided on scaler_spawn_times (decided_at)`.execute(db);
    },
  },
  /**
   * The queue's wake-up says what changed, so that a peer re-reads only that, not the whole queue
   * (a million rows at a million queued jobs): a statement that queued new jobs names the lowest
   * place (seq) among them, an update that left one row queued names the job. Identical
   * notifications in one transaction still fold into one. And an index for the newest-first job list.
   */
  '030_queued': {
    async up(db: Kysely<unknown>) {
      await sql`
        create or replace function kici_notify_queued() returns trigger language plpgsql as $$
        declare low bigint;
        begin
          select min(seq) into low from changed where state = 'queued';
          if low is not null then
            perform pg_notify('kici_jobs_queued', 'from:' || low);
          end if;
          return null;
        end $$`.execute(db);
      await sql`
        create or replace function kici_notify_queued_row() returns trigger language plpgsql as $$
        begin
          perform pg_notify('kici_jobs_queued', 'job:' || new.id);
          return null;
        end $$`.execute(db);
      // The newest jobs first (`/api/v1/jobs` without a state): read from this index's end, not by
      // sorting every job ever stored.
      await sql`create index jobs_seq on jobs (seq)`.execute(db);
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
