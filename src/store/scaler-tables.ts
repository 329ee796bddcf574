/**
 * The scaler's tables: its spawns and what outlives them (outcomes, spawn times), reservations,
 * job correlation, event provisions' claim codes and scale-event deliveries, and micro-VM address
 * leases. The Database interface (schema.ts) names them with the rest.
 */
import type { ColumnType, Generated } from 'kysely';
import type { Json, NullableTimestamp, Timestamp } from './column-types.js';

export interface ScalerSpawningAgentsTable {
  agent_id: string;
  scaler_name: string;
  backend_type: string;
  label_set: Json<string[]>;
  run_id: string | null;
  bound_job_id: string | null;
  owner_instance_id: string | null;
  /** Backend handle that lets a restarted orchestrator reclaim the compute (e.g. a process group id). */
  backend_ref: string | null;
  mandatory_labels: Json<string[]>;
  spawned_at: Timestamp;
  /** Set once the agent registered; the record then lives until its compute is destroyed. */
  registered_at: NullableTimestamp;
  adopted_by: string | null;
  adopted_at: NullableTimestamp;
  /** Where the scale-down of an event provision goes (migration 010); null for local backends. */
  provisioning_targets: ColumnType<string[] | null, string | null | undefined, string | null>;
  /**
   * The backend's peerAdoptable capability at spawn (migration 031_spawn_peer_adoptable): the row
   * counts on the store's cluster-wide cap, any orchestrator may adopt its agent, and the leader's
   * reaper watches it. False for compute pinned to the spawning host.
   */
  peer_adoptable: ColumnType<boolean, boolean | undefined, boolean>;
}

/** Who adopted an event provision, kept after its spawn row is deleted (migration 010). */
export interface ScalerProvisionOutcomesTable {
  agent_id: string;
  scaler_name: string;
  adopted_by: string | null;
  adopted_at: NullableTimestamp;
  condemned_reason: string | null;
  condemned_at: NullableTimestamp;
  /** The instance whose reaper condemned it (migration 018_provision_outcomes). */
  condemned_by: string | null;
  reap_attempts: Generated<number>;
  recorded_at: Timestamp;
  updated_at: Timestamp;
}

export interface ScalerReservationsTable {
  agent_id: string;
  scaler_name: string;
  cpu_units: number;
  mem_bytes: ColumnType<string | number, number, number>;
  owner_instance_id: string | null;
  reserved_at: Timestamp;
}

export interface ScalerAgentJobsTable {
  agent_id: string;
  run_id: string;
  job_id: string;
  correlated_at: Timestamp;
}

/**
 * When each provision was decided, when its agent registered and when it was gone (migration
 * 028_spawn_times): the latencies a trace carries so a replay spawns and releases as the host did.
 * Outlives the spawn row, which goes with the agent.
 */
export interface ScalerSpawnTimesTable {
  agent_id: string;
  scaler_name: string;
  backend_type: string;
  /** The label set's key, as the scaler status shows it. */
  label_set: string;
  /** The job the spawn was decided for; null for a warm agent. */
  bound_job_id: string | null;
  decided_at: Timestamp;
  registered_at: NullableTimestamp;
  gone_at: NullableTimestamp;
}

/** One claim code of an event provision; only its SHA-256 is kept. */
export interface ScalerPendingClaimsTable {
  claim_hash: string;
  claim_prefix: string;
  agent_id: string;
  scaler_name: string;
  labels: Json<string[]>;
  agent_token_ttl_ms: ColumnType<string | number, number, number>;
  orchestrator_url: string;
  expires_at: Timestamp;
  consumed_at: NullableTimestamp;
  created_at: Generated<Date>;
}

/** One scale event sent to one provisioning target: state, attempts and the last error. */
export interface ScalerEventDeliveriesTable {
  event_id: string;
  target: string;
  event_name: string;
  scaler_name: string;
  agent_id: string;
  reason: string | null;
  payload: Json<Record<string, unknown>>;
  state: string;
  attempts: Generated<number>;
  last_error: string | null;
  job_id: string | null;
  created_at: Generated<Date>;
  updated_at: Generated<Date>;
}

/** A micro-VM's address lease on its scaler's bridge. */
export interface IpAllocationsTable {
  ip: string;
  vm_id: string;
  scaler_name: string;
  tap_device: string;
  mac_address: string;
  allocated_at: Timestamp;
}
