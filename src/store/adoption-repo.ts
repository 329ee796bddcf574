import { sql, type Kysely } from 'kysely';
import { PEER_ADOPTABLE_ROW, peerAdoptableRow } from './peer-adoptable.js';
import type { Database } from './schema.js';

/** An event provision this instance now answers for: what it needs to gate and tear down the agent. */
export interface AdoptedSpawn {
  agentId: string;
  scalerName: string;
  labelSet: string[];
  runId: string | null;
  boundJobId: string | null;
  ownerInstanceId: string | null;
  mandatoryLabels: string[];
  provisioningTargets: string[];
  backendRef: string | null;
  /** The row had registered before (a re-adoption by the same instance after a reconnect or restart). */
  registeredBefore: boolean;
}

/** Why a spawn row could not be adopted, for the refusal message. */
export interface SpawnRowFacts {
  /** Named in the refusal only; whether the row may be adopted is `peerAdoptable`. */
  backendType: string;
  peerAdoptable: boolean;
  ownerInstanceId: string | null;
  adoptedBy: string | null;
}

/**
 * Cross-instance adoption of event provisions. The row decides who answers for an agent: one
 * conditional update, so of any number of instances racing, exactly one wins, and the winner may
 * adopt again (its agent reconnecting). Rows that are not peer-adoptable (peer-adoptable.ts; a local
 * backend's) never match: their compute is pinned to the host that spawned it.
 */
export class AdoptionRepo {
  constructor(private readonly db: Kysely<Database>) {}

  async adoptSpawningAgent(agentId: string, instanceId: string, now: Date): Promise<AdoptedSpawn | null> {
    return this.db.transaction().execute(async (trx) => {
      const row = await trx
        .updateTable('scaler_spawning_agents')
        .set({
          adopted_by: instanceId,
          adopted_at: sql<Date>`coalesce(adopted_at, ${now})`,
          // Registered now: the leader's reaper only reaps provisions that never registered.
          registered_at: sql<Date>`coalesce(registered_at, ${now})`,
        })
        .where('agent_id', '=', agentId)
        .where(PEER_ADOPTABLE_ROW)
        .where((eb) => eb.or([eb('adopted_by', 'is', null), eb('adopted_by', '=', instanceId)]))
        .returning([
          'agent_id',
          'scaler_name',
          'label_set',
          'run_id',
          'bound_job_id',
          'owner_instance_id',
          'mandatory_labels',
          'provisioning_targets',
          'backend_ref',
          'adopted_at',
          sql<boolean>`registered_at < ${now}`.as('registered_before'),
        ])
        .executeTakeFirst();
      if (!row) return null;
      // First adopter wins here too: the outcome outlives the spawn row, so the spawner can tell
      // "adopted elsewhere" from "never came" after the adopter has torn the agent down.
      await trx
        .insertInto('scaler_provision_outcomes')
        .values({
          agent_id: agentId,
          scaler_name: row.scaler_name,
          adopted_by: instanceId,
          adopted_at: row.adopted_at ?? now,
          recorded_at: now,
          updated_at: now,
        })
        .onConflict((oc) =>
          oc.column('agent_id').doUpdateSet({
            adopted_by: sql<string>`coalesce(scaler_provision_outcomes.adopted_by, excluded.adopted_by)`,
            adopted_at: sql<Date>`coalesce(scaler_provision_outcomes.adopted_at, excluded.adopted_at)`,
            updated_at: now,
          }),
        )
        .execute();
      return {
        agentId,
        scalerName: row.scaler_name,
        labelSet: row.label_set,
        runId: row.run_id,
        boundJobId: row.bound_job_id,
        ownerInstanceId: row.owner_instance_id,
        mandatoryLabels: row.mandatory_labels,
        provisioningTargets: row.provisioning_targets ?? [],
        backendRef: row.backend_ref,
        registeredBefore: row.registered_before === true,
      };
    });
  }

  /** What the row says about an agent an adoption did not win (undefined: there is no row). */
  async describe(agentId: string): Promise<SpawnRowFacts | undefined> {
    const row = await this.db
      .selectFrom('scaler_spawning_agents')
      .select(['backend_type', 'peer_adoptable', 'owner_instance_id', 'adopted_by'])
      .where('agent_id', '=', agentId)
      .executeTakeFirst();
    return row
      ? {
          backendType: row.backend_type,
          peerAdoptable: peerAdoptableRow(row),
          ownerInstanceId: row.owner_instance_id,
          adoptedBy: row.adopted_by,
        }
      : undefined;
  }

  /** Who adopted a provision: the live row's adopter, else the outcome's, else null. */
  async provisionAdopters(agentIds: readonly string[]): Promise<Map<string, string | null>> {
    const out = new Map<string, string | null>(agentIds.map((id) => [id, null]));
    if (!agentIds.length) return out;
    const live = await this.db
      .selectFrom('scaler_spawning_agents')
      .select(['agent_id', 'adopted_by'])
      .where('agent_id', 'in', agentIds)
      .execute();
    const outcomes = await this.db
      .selectFrom('scaler_provision_outcomes')
      .select(['agent_id', 'adopted_by'])
      .where('agent_id', 'in', agentIds)
      .execute();
    for (const r of outcomes) if (r.adopted_by) out.set(r.agent_id, r.adopted_by);
    for (const r of live) if (r.adopted_by) out.set(r.agent_id, r.adopted_by);
    return out;
  }

  /**
   * Record the reaper's verdict on a provision before its scale-down is sent. One conditional
   * upsert: it wins when nobody condemned the provision yet, when this instance did (its own
   * re-attempt), or when the last verdict is older than `retryBefore` (a reaper that died before
   * it could finish). So two leaders in a row do not both send a scale-down for it.
   */
  async condemn(
    agentId: string,
    scalerName: string,
    reason: string,
    by: string,
    now: Date,
    retryBefore: Date,
  ): Promise<boolean> {
    const row = await this.db
      .insertInto('scaler_provision_outcomes')
      .values({
        agent_id: agentId,
        scaler_name: scalerName,
        condemned_reason: reason,
        condemned_at: now,
        condemned_by: by,
        reap_attempts: 1,
        recorded_at: now,
        updated_at: now,
      })
      .onConflict((oc) =>
        oc
          .column('agent_id')
          .doUpdateSet({
            condemned_reason: reason,
            condemned_at: now,
            condemned_by: by,
            reap_attempts: sql<number>`scaler_provision_outcomes.reap_attempts + 1`,
            updated_at: now,
          })
          .where((eb) =>
            eb.or([
              eb('scaler_provision_outcomes.condemned_at', 'is', null),
              eb('scaler_provision_outcomes.condemned_by', '=', by),
              eb('scaler_provision_outcomes.condemned_at', '<', retryBefore),
            ]),
          ),
      )
      .returning('agent_id')
      .executeTakeFirst();
    return row !== undefined;
  }

  /** A provision's recorded end, if any (status and tests read it). */
  async outcome(agentId: string) {
    return this.db
      .selectFrom('scaler_provision_outcomes')
      .selectAll()
      .where('agent_id', '=', agentId)
      .executeTakeFirst();
  }

  /** Drop outcomes nobody can ask about any more: older than `cutoff` and without a spawn row. */
  async purgeOutcomes(cutoff: Date): Promise<number> {
    const res = await this.db
      .deleteFrom('scaler_provision_outcomes')
      .where('updated_at', '<', cutoff)
      .where((eb) =>
        eb.not(
          eb.exists(
            eb
              .selectFrom('scaler_spawning_agents')
              .select('agent_id')
              .whereRef('scaler_spawning_agents.agent_id', '=', 'scaler_provision_outcomes.agent_id'),
          ),
        ),
      )
      .executeTakeFirst();
    return Number(res.numDeletedRows);
  }
}
