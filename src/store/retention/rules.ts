import { sql, type RawBuilder } from 'kysely';
import type { RetentionPolicy } from './policy.js';

/** The settings that are ages (everything in the policy but its timing knobs). */
export type AgeSetting = Exclude<keyof RetentionPolicy, 'intervalMs' | 'batchRows'>;

/**
 * One kind of row the pruner deletes once it is older than its setting. Adding a table to
 * retention is one entry here; finished jobs are the exception (see job-pruner.ts), because each
 * leaves a tombstone and its log rows go in batches of their own.
 */
export interface PruneRule {
  /** The table, also the `table` label of the pruned-rows metric. */
  table: string;
  setting: AgeSetting;
  /** The rows old enough to go, given the cutoff instant; must never match a live row. */
  where(cutoff: Date): RawBuilder<unknown>;
  /** A table another feature may not have created: skipped while it does not exist. */
  optional?: boolean;
}

const at = (d: Date) => sql`${d.toISOString()}::timestamptz`;

export const PRUNE_RULES: readonly PruneRule[] = [
  {
    // A run goes with its last job.
    table: 'runs',
    setting: 'jobsMs',
    where: (c) => sql`created_at < ${at(c)} and not exists (select 1 from jobs j where j.run_id = runs.id)`,
  },
  {
    table: 'job_tombstones',
    setting: 'tombstonesMs',
    where: (c) => sql`pruned_at < ${at(c)} and logs_pruned`,
  },
  {
    table: 'scaler_event_deliveries',
    setting: 'eventsMs',
    where: (c) => sql`state <> 'pending' and updated_at < ${at(c)}`,
  },
  { table: 'kici_reload_results', setting: 'eventsMs', where: (c) => sql`answered_at < ${at(c)}` },
  { table: 'kici_reload_requests', setting: 'eventsMs', where: (c) => sql`requested_at < ${at(c)}` },
  {
    table: 'kici_backoff_reset_results',
    setting: 'eventsMs',
    where: (c) => sql`answered_at < ${at(c)}`,
  },
  { table: 'kici_backoff_resets', setting: 'eventsMs', where: (c) => sql`requested_at < ${at(c)}` },
  {
    // Only instances that stopped cleanly; a crashed one's row is what lets the leader settle its jobs.
    table: 'kici_instances',
    setting: 'eventsMs',
    where: (c) => sql`stopped_at < ${at(c)} and last_heartbeat < ${at(c)}`,
  },
  {
    table: 'agent_tokens',
    setting: 'tokensMs',
    where: (c) => sql`kind <> 'admin' and (revoked_at < ${at(c)} or expires_at < ${at(c)})`,
  },
  {
    table: 'scaler_pending_claims',
    setting: 'tokensMs',
    where: (c) => sql`(consumed_at < ${at(c)} or expires_at < ${at(c)})`,
  },
  {
    // Kept while the spawn row lives: adoption asks who adopted a provision that still runs.
    table: 'scaler_provision_outcomes',
    setting: 'spawnsMs',
    where: (c) =>
      sql`updated_at < ${at(c)} and not exists (
        select 1 from scaler_spawning_agents s where s.agent_id = scaler_provision_outcomes.agent_id)`,
  },
  {
    table: 'scaler_agent_jobs',
    setting: 'spawnsMs',
    where: (c) =>
      sql`correlated_at < ${at(c)} and not exists (
        select 1 from scaler_spawning_agents s where s.agent_id = scaler_agent_jobs.agent_id)`,
  },
  {
    table: 'scaler_spawn_times',
    setting: 'spawnsMs',
    where: (c) =>
      sql`decided_at < ${at(c)} and not exists (
        select 1 from scaler_spawning_agents s where s.agent_id = scaler_spawn_times.agent_id)`,
  },
  {
    table: 'agents',
    setting: 'spawnsMs',
    where: (c) => sql`state = 'gone' and disconnected_at < ${at(c)}`,
  },
  { table: 'admin_audit', setting: 'auditMs', where: (c) => sql`at < ${at(c)}` },
  {
    // Operator tokens go once revoked or expired for longer than the setting; live ones never.
    table: 'access_tokens',
    setting: 'tokensMs',
    where: (c) => sql`coalesce(revoked_at, expires_at) < ${at(c)}`,
  },
  {
    // A session outlives its agent's socket (a reconnect must prove it), but not the agent's row.
    table: 'agent_sessions',
    setting: 'spawnsMs',
    where: (c) =>
      sql`opened_at < ${at(c)} and not exists (
        select 1 from agents a where a.id = agent_sessions.agent_id and a.state <> 'gone')`,
  },
];
