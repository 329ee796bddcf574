import { sql, type Kysely, type Migration } from 'kysely';

/**
 * The first schema (runs, jobs, steps, agents, tokens) and its first additions: the log cap, retries,
 * event claims and deliveries.
 */
export const coreMigrations: Record<string, Migration> = {
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
};
