import type { Kysely } from 'kysely';
import type { ScalerEntry } from '../config/index.js';
import type { Database } from '../store/schema.js';
import { withScalerCapLock } from '../store/scaler-cap-lock.js';
import type { SpawnRecord } from '../store/spawns-repo.js';

/**
 * Record an event provision only if the scaler's cluster-wide cap allows it and no orchestrator
 * already provisions for the same job. Returns why it was refused, or undefined when recorded.
 */
export async function reserveEventSpawn(
  db: Kysely<Database>,
  entry: Pick<ScalerEntry, 'name' | 'maxAgents'>,
  record: SpawnRecord,
  reservation: { cpus: number; memBytes: number },
): Promise<string | undefined> {
  return withScalerCapLock(db, entry.name, async (lock) => {
    if (lock.clusterActiveCount >= entry.maxAgents)
      return `event scaler "${entry.name}" is at its cluster-wide cap (${lock.clusterActiveCount}/${entry.maxAgents} provisions)`;
    if (record.boundJobId && (await lock.hasProvisionForJob(record.boundJobId)))
      return `job ${record.boundJobId} already has a provision of event scaler "${entry.name}"`;
    await lock.reserve(record, reservation);
    return undefined;
  });
}
