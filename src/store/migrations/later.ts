import { sql, type Kysely, type Migration } from 'kysely';

/**
 * After the cluster work: hot-path shapes, agent sessions, access tokens and their audit,
 * retention, priority, cluster settings and view, backoff resets, spawn times, hinted wake-ups,
 * peer-adoptable spawn rows.
 */
export const laterMigrations: Record<string, Migration> = {
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
  /**
   * Whether a spawn's agent may be adopted by any orchestrator on the store is the backend's
   * capability (peerAdoptable), recorded on the row so that the cluster cap, adoption and the
   * reaper ask it rather than the type name. Until now only the event backend declared it and the
   * store went by `backend_type`: its rows already written (provisions in flight across an
   * upgrade) are set to what that meant, so they are counted, adopted and reaped as before.
   */
  '031_spawn_peer_adoptable': {
    async up(db: Kysely<unknown>) {
      await sql`
        alter table scaler_spawning_agents
          add column peer_adoptable boolean not null default false`.execute(db);
      await sql`
        update scaler_spawning_agents set peer_adoptable = true
        where backend_type = 'event'`.execute(db);
    },
  },
};
