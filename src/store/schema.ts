import type { ColumnType, Generated } from 'kysely';
import type { Json, NullableTimestamp, Timestamp } from './column-types.js';
import type {
  IpAllocationsTable,
  ScalerAgentJobsTable,
  ScalerEventDeliveriesTable,
  ScalerPendingClaimsTable,
  ScalerProvisionOutcomesTable,
  ScalerReservationsTable,
  ScalerSpawningAgentsTable,
  ScalerSpawnTimesTable,
} from './scaler-tables.js';

/** Every state a job can be in, in the order of its life (the API's `state` filter names them so). */
export const JOB_STATES = [
  'queued',
  'dispatched',
  'running',
  'succeeded',
  'failed',
  'cancelled',
  'timed-out',
  'no-backend',
] as const;

export type JobState = (typeof JOB_STATES)[number];

export const TERMINAL_JOB_STATES: readonly JobState[] = [
  'succeeded',
  'failed',
  'cancelled',
  'timed-out',
  'no-backend',
];

export interface RunsTable {
  id: string;
  name: string | null;
  created_at: Timestamp;
}

export interface JobsTable {
  id: string;
  run_id: string;
  name: string;
  /** Monotonic submission order: the queue is FIFO by this column. */
  seq: Generated<string>;
  state: JobState;
  runs_on: Json<string[]>;
  spec: Json<unknown>;
  agent_id: string | null;
  exit_code: number | null;
  reason: string | null;
  last_provisioning_error: string | null;
  attempts: Generated<number>;
  /** 1 for a submitted job; a retry is the latest attempt of its name in the run plus one. */
  attempt: Generated<number>;
  /** The finished job this one retries (null for a submitted job). */
  retry_of: string | null;
  /** The stored log lost its middle to the per-job cap (head and tail kept). */
  log_truncated: Generated<boolean>;
  /** Higher is dispatched first within a label set. */
  priority: Generated<number>;
  /** The team the run belongs to (fair share); null for none. */
  owner: string | null;
  /** Clustering: the instance that dispatched the job (null on a single instance's old rows). */
  owner_instance?: string | null;
  /** Clustering: a cancel asked of an instance that does not hold the job, for its owner to carry out. */
  cancel_requested_at?: NullableTimestamp;
  cancel_reason?: string | null;
  created_at: Timestamp;
  dispatched_at: NullableTimestamp;
  started_at: NullableTimestamp;
  finished_at: NullableTimestamp;
}

export interface StepResultsTable {
  job_id: string;
  idx: number;
  name: string;
  exit_code: number | null;
  timed_out: boolean;
  started_at: Timestamp;
  finished_at: NullableTimestamp;
}

export interface JobLogsTable {
  id: Generated<string>;
  job_id: string;
  step_idx: number | null;
  stream: string;
  line: string;
  ts: Timestamp;
}

export interface AgentsTable {
  id: string;
  kind: 'static' | 'scaler';
  labels: Json<string[]>;
  scaler_name: string | null;
  state: 'connected' | 'gone';
  hostname: string | null;
  version: string | null;
  connected_at: Timestamp;
  last_seen_at: Timestamp;
  disconnected_at: NullableTimestamp;
  /** The orchestrator instance the agent's socket is on (null on rows from before clustering). */
  instance_id?: string | null;
}

export interface AgentTokensTable {
  id: string;
  token_hash: string;
  agent_id: string;
  labels: Json<string[]>;
  kind: 'static' | 'ephemeral' | 'admin';
  expires_at: NullableTimestamp;
  created_at: Timestamp;
  revoked_at: NullableTimestamp;
  /** Set at each registration the token let through. */
  last_used_at: NullableTimestamp;
}

/** One orchestrator of a cluster (migration 006_cluster_instances). */
export interface KiciInstancesTable {
  id: string;
  address: string;
  version: string;
  heartbeat_ms: number;
  started_at: Timestamp;
  last_heartbeat: Timestamp;
  agents_connected: number;
  jobs_running: number;
  leader: Generated<boolean>;
  stopped_at: NullableTimestamp;
  scale_label_sets: ColumnType<string[][], string | undefined, string>;
  /** What this instance last published of its own state (the cluster view); null before the first. */
  part: ColumnType<unknown, string | null | undefined, string | null>;
}

export interface Database {
  runs: RunsTable;
  jobs: JobsTable;
  step_results: StepResultsTable;
  job_logs: JobLogsTable;
  agents: AgentsTable;
  agent_tokens: AgentTokensTable;
  scaler_spawning_agents: ScalerSpawningAgentsTable;
  scaler_reservations: ScalerReservationsTable;
  scaler_agent_jobs: ScalerAgentJobsTable;
  scaler_spawn_times: ScalerSpawnTimesTable;
  scaler_pending_claims: ScalerPendingClaimsTable;
  scaler_event_deliveries: ScalerEventDeliveriesTable;
  kici_instances: KiciInstancesTable;
  ip_allocations: IpAllocationsTable;
  scaler_provision_outcomes: ScalerProvisionOutcomesTable;
  agent_sessions: AgentSessionsTable;
  access_tokens: AccessTokensTable;
  admin_audit: AdminAuditTable;
  cluster_settings: ClusterSettingsTable;
}

/** A live-tunable setting's cluster-wide value (migration 025_cluster_settings). */
export interface ClusterSettingsTable {
  key: string;
  /** bigint: the drivers hand it back as a string. */
  value: ColumnType<string, number, number>;
  updated_at: Generated<Date>;
  updated_by: string | null;
}

/** One agent's session: only the SHA-256 of its secret is kept (migration 014_agent_sessions). */
export interface AgentSessionsTable {
  agent_id: string;
  secret_hash: string;
  jobs_taken: Generated<number>;
  opened_at: Generated<Date>;
}

/** An operator's access token: only its SHA-256 is kept. */
export interface AccessTokensTable {
  id: string;
  name: string;
  role: string;
  token_hash: string;
  bootstrap: Generated<boolean>;
  created_by: string | null;
  created_at: Timestamp;
  expires_at: NullableTimestamp;
  revoked_at: NullableTimestamp;
  last_used_at: NullableTimestamp;
}

/** One mutating or refused admin API call. */
export interface AdminAuditTable {
  id: Generated<string>;
  at: Timestamp;
  token_id: string | null;
  token_name: string | null;
  role: string | null;
  action: string;
  target: string | null;
  result: string;
  status: number;
  remote: string | null;
}
