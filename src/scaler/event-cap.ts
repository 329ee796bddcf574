import type { Kysely } from 'kysely';
import type { ScalerEntry } from '../config/index.js';
import type { Database } from '../store/schema.js';
import { withScalerCapLock } from '../store/scaler-cap-lock.js';
import type { SpawnRecord } from '../store/spawns-repo.js';
import { errorMessage } from '../util/errors.js';

/**
 * How long a provision waits for another orchestrator's hold on the cap lock before it gives up
 * (and the job is offered again later): a stuck holder must not stall every provision behind it.
 */
export const EVENT_CAP_LOCK_TIMEOUT_MS = 5_000;

/** Why the cluster cap could not be consulted: another holder kept the lock, or the database failed. */
export type CapLockFailure = 'contended' | 'unreachable';

export type EventSlot =
  | { kind: 'reserved' }
  /** Another orchestrator (or an earlier pass) already provisions for this job: not a capacity problem. */
  | { kind: 'in-flight'; reason: string }
  | { kind: 'at-cap'; reason: string }
  | { kind: 'lock-failure'; failure: CapLockFailure; reason: string };

/** PostgreSQL reports a lock_timeout as lock_not_available (SQLSTATE 55P03). */
export function capLockFailureOf(err: unknown): CapLockFailure {
  return (err as { code?: unknown } | null)?.code === '55P03' ? 'contended' : 'unreachable';
}

/**
 * Record an event provision only if no orchestrator already provisions for the same job and the
 * scaler's cluster-wide cap allows it. A database error is an outcome too, never a throw.
 */
export async function claimEventSlot(
  db: Kysely<Database>,
  entry: Pick<ScalerEntry, 'name' | 'maxAgents'>,
  record: SpawnRecord,
  reservation: { cpus: number; memBytes: number },
  lockTimeoutMs: number = EVENT_CAP_LOCK_TIMEOUT_MS,
): Promise<EventSlot> {
  try {
    return await withScalerCapLock(
      db,
      entry.name,
      async (lock): Promise<EventSlot> => {
        if (record.boundJobId && (await lock.hasProvisionForJob(record.boundJobId)))
          return {
            kind: 'in-flight',
            reason: `job ${record.boundJobId} already has a provision of event scaler "${entry.name}"`,
          };
        if (lock.clusterActiveCount >= entry.maxAgents)
          return {
            kind: 'at-cap',
            reason: `event scaler "${entry.name}" is at its cluster-wide cap (${lock.clusterActiveCount}/${entry.maxAgents} provisions)`,
          };
        await lock.reserve(record, reservation);
        return { kind: 'reserved' };
      },
      { lockTimeoutMs },
    );
  } catch (err) {
    const failure = capLockFailureOf(err);
    return {
      kind: 'lock-failure',
      failure,
      reason: `event scaler "${entry.name}": the cluster cap lock is ${failure === 'contended' ? 'held too long by another orchestrator' : 'unavailable'} (${errorMessage(err)})`,
    };
  }
}

/**
 * The older form: why the provision was refused, or undefined when recorded. A database error
 * rejects, as before.
 */
export async function reserveEventSpawn(
  db: Kysely<Database>,
  entry: Pick<ScalerEntry, 'name' | 'maxAgents'>,
  record: SpawnRecord,
  reservation: { cpus: number; memBytes: number },
): Promise<string | undefined> {
  return withScalerCapLock(db, entry.name, async (lock) => {
    if (record.boundJobId && (await lock.hasProvisionForJob(record.boundJobId)))
      return `job ${record.boundJobId} already has a provision of event scaler "${entry.name}"`;
    if (lock.clusterActiveCount >= entry.maxAgents)
      return `event scaler "${entry.name}" is at its cluster-wide cap (${lock.clusterActiveCount}/${entry.maxAgents} provisions)`;
    await lock.reserve(record, reservation);
    return undefined;
  });
}
