import { sql, type Kysely, type Migration } from 'kysely';

/**
 * Several orchestrators on one PostgreSQL: presence, the shared queue and its wake-up, reload
 * fan-out, VM address leases, adoption of event provisions, reconnects and cancels.
 */
export const clusterMigrations: Record<string, Migration> = {
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
};
