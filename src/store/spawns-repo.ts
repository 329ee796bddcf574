import type { Insertable, Kysely, Selectable } from 'kysely';
import type {
  ScalerReservationsTable,
  ScalerSpawningAgentsTable,
  ScalerSpawnTimesTable,
} from './scaler-tables.js';
import type { AgentTokensTable, Database } from './schema.js';
import { HeldSync, type HeldWrite } from './sync-gate.js';

export type SpawnRow = Selectable<ScalerSpawningAgentsTable>;
export type ReservationRow = Selectable<ScalerReservationsTable>;

export interface SpawnRecord {
  agentId: string;
  scalerName: string;
  backendType: string;
  labelSet: string[];
  runId: string | null;
  boundJobId: string | null;
  ownerInstanceId: string;
  mandatoryLabels: string[];
  spawnedAt: Date;
  /** The label set's key (normalized labels); the declared labels joined when absent. */
  labelSetKey?: string | undefined;
  /**
   * The backend's peerAdoptable capability: any orchestrator sharing the store may adopt the
   * agent, and the spawn counts on the cap kept there.
   */
  peerAdoptable: boolean;
  /** Peer-adoptable provisions: where the scale-down goes, so any orchestrator can tear it down. */
  provisioningTargets?: string[] | undefined;
}

/**
 * Spawn records and reservations: what a restarted orchestrator needs to find its own agents
 * and to rebuild its cap usage. Usage is always derived from reservation rows, never stored.
 */
export class SpawnsRepo {
  constructor(
    private readonly db: Kysely<Database>,
    private readonly held: HeldSync = new HeldSync(db),
  ) {}

  async insertSpawn(r: SpawnRecord, reservation: { cpus: number; memBytes: number }): Promise<void> {
    await insertSpawnRows(this.db, r, reservation);
  }

  /**
   * The spawn record and the agent's token, in one statement: one commit and one call into the
   * store on the way to a cold agent's start, and never a token without the record that lets a
   * restarted orchestrator find and reap its agent. The commit's sync is held until `durable()`
   * (sync-gate.ts), which runs it off the main thread: the caller decides whether the launch waits.
   */
  insertSpawnAndToken(
    r: SpawnRecord,
    reservation: { cpus: number; memBytes: number },
    token: Insertable<AgentTokensTable>,
  ): Promise<HeldWrite<void>> {
    return this.held.run((db) => spawnAndToken(db, r, reservation, token));
  }

  async setBackendRef(agentId: string, ref: string): Promise<void> {
    await this.db
      .updateTable('scaler_spawning_agents')
      .set({ backend_ref: ref })
      .where('agent_id', '=', agentId)
      .execute();
  }

  /**
   * One statement for both rows: on the embedded database each commit is a sync, and this one lies
   * between a fresh agent's hello and its job.
   */
  async markRegistered(agentId: string, now: Date): Promise<void> {
    await this.db
      .with('spawning', (db) =>
        db.updateTable('scaler_spawning_agents').set({ registered_at: now }).where('agent_id', '=', agentId),
      )
      .updateTable('scaler_spawn_times')
      .set({ registered_at: now })
      .where('agent_id', '=', agentId)
      .where('registered_at', 'is', null)
      .execute();
  }

  /**
   * Forget an agent for good: its compute is gone and its reservation is released. `goneAt`, when
   * known, is kept as the end of the provision (its release latency, for traces).
   */
  async deleteAgent(agentId: string, goneAt?: Date): Promise<void> {
    await this.db.transaction().execute(async (trx) => {
      if (goneAt) {
        await trx
          .updateTable('scaler_spawn_times')
          .set({ gone_at: goneAt })
          .where('agent_id', '=', agentId)
          .where('gone_at', 'is', null)
          .execute();
      }
      await trx.deleteFrom('scaler_spawning_agents').where('agent_id', '=', agentId).execute();
      await trx.deleteFrom('scaler_reservations').where('agent_id', '=', agentId).execute();
      await trx.deleteFrom('scaler_agent_jobs').where('agent_id', '=', agentId).execute();
    });
  }

  /** This instance's spawn rows, except those a peer adopted (that peer owns their teardown). */
  listOwned(instanceId: string): Promise<SpawnRow[]> {
    return this.db
      .selectFrom('scaler_spawning_agents')
      .selectAll()
      .where('owner_instance_id', '=', instanceId)
      .where((eb) => eb.or([eb('adopted_by', 'is', null), eb('adopted_by', '=', instanceId)]))
      .execute();
  }

  listReservations(instanceId: string): Promise<ReservationRow[]> {
    return this.db
      .selectFrom('scaler_reservations')
      .selectAll()
      .where('owner_instance_id', '=', instanceId)
      .execute();
  }

  async correlate(agentId: string, runId: string, jobId: string, now: Date): Promise<void> {
    await this.db
      .insertInto('scaler_agent_jobs')
      .values({ agent_id: agentId, run_id: runId, job_id: jobId, correlated_at: now })
      .onConflict((oc) => oc.column('agent_id').doUpdateSet({ run_id: runId, job_id: jobId }))
      .execute();
  }
}

const spawningValues = (r: SpawnRecord): Insertable<ScalerSpawningAgentsTable> => ({
  agent_id: r.agentId,
  scaler_name: r.scalerName,
  backend_type: r.backendType,
  label_set: JSON.stringify(r.labelSet),
  run_id: r.runId,
  bound_job_id: r.boundJobId,
  owner_instance_id: r.ownerInstanceId,
  backend_ref: null,
  mandatory_labels: JSON.stringify(r.mandatoryLabels),
  spawned_at: r.spawnedAt,
  peer_adoptable: r.peerAdoptable,
  ...(r.provisioningTargets ? { provisioning_targets: JSON.stringify(r.provisioningTargets) } : {}),
});

/** The decision's moment, kept past the agent's life for traces (a re-spawn of the id keeps the first). */
const spawnTimesValues = (r: SpawnRecord): Insertable<ScalerSpawnTimesTable> => ({
  agent_id: r.agentId,
  scaler_name: r.scalerName,
  backend_type: r.backendType,
  label_set: r.labelSetKey ?? r.labelSet.join(','),
  bound_job_id: r.boundJobId,
  decided_at: r.spawnedAt,
});

const reservationValues = (
  r: SpawnRecord,
  reservation: { cpus: number; memBytes: number },
): Insertable<ScalerReservationsTable> => ({
  agent_id: r.agentId,
  scaler_name: r.scalerName,
  cpu_units: reservation.cpus,
  mem_bytes: reservation.memBytes,
  owner_instance_id: r.ownerInstanceId,
  reserved_at: r.spawnedAt,
});

/**
 * The spawn row and its decision time as the leading clauses of one statement: every way a spawn
 * is recorded (with its token, or inside the cap lock's transaction) writes them alike, all or
 * nothing with what the statement goes on to insert.
 */
function withSpawnRow(db: Kysely<Database>, r: SpawnRecord) {
  return db
    .with('spawning', (q) => q.insertInto('scaler_spawning_agents').values(spawningValues(r)))
    .with('times', (q) =>
      q
        .insertInto('scaler_spawn_times')
        .values(spawnTimesValues(r))
        .onConflict((oc) => oc.column('agent_id').doNothing()),
    );
}

/** The spawn row and its reservation, in one statement (inside the caller's transaction, if any). */
export async function insertSpawnRows(
  db: Kysely<Database>,
  r: SpawnRecord,
  reservation: { cpus: number; memBytes: number },
): Promise<void> {
  await withSpawnRow(db, r)
    .insertInto('scaler_reservations')
    .values(reservationValues(r, reservation))
    .execute();
}

/** The spawn record and the agent's token, in one statement. */
async function spawnAndToken(
  db: Kysely<Database>,
  r: SpawnRecord,
  reservation: { cpus: number; memBytes: number },
  token: Insertable<AgentTokensTable>,
): Promise<void> {
  await withSpawnRow(db, r)
    .with('reserved', (db) => db.insertInto('scaler_reservations').values(reservationValues(r, reservation)))
    .insertInto('agent_tokens')
    .values(token)
    .execute();
}
