import { sql, type Kysely, type Transaction } from 'kysely';
import { PEER_ADOPTABLE_ROW } from './peer-adoptable.js';
import type { Database } from './schema.js';
import { insertSpawnRows, type SpawnRecord } from './spawns-repo.js';

/** What a caller sees while it holds a scaler's cap lock. */
export interface ScalerCapLock {
  /** This scaler's peer-adoptable spawn rows, on every orchestrator sharing the store. */
  readonly clusterActiveCount: number;
  /** Does any orchestrator already hold a provision bound to this job? (One provision per job.) */
  hasProvisionForJob(jobId: string): Promise<boolean>;
  /** Write the spawn row and its reservation inside the locked transaction. */
  reserve(record: SpawnRecord, reservation: { cpus: number; memBytes: number }): Promise<void>;
}

export interface CapLockOptions {
  /** Give up waiting for the lock after this long (`lock_timeout`); absent: wait as long as it takes. */
  lockTimeoutMs?: number | undefined;
}

/**
 * Run `fn` holding the cluster-wide cap lock of `scalerName`. The lock is a transaction-scoped
 * advisory lock, so it is released by the commit that makes the new spawn row visible: the next
 * holder (on any orchestrator sharing this PostgreSQL) counts that row. READ COMMITTED lets each
 * statement see what the previous holder committed. PGlite is PostgreSQL too; there the lock is
 * trivially uncontended.
 */
export async function withScalerCapLock<T>(
  db: Kysely<Database>,
  scalerName: string,
  fn: (lock: ScalerCapLock) => Promise<T>,
  opts: CapLockOptions = {},
): Promise<T> {
  return db
    .transaction()
    .setIsolationLevel('read committed')
    .execute(async (trx) => {
      const timeout = opts.lockTimeoutMs;
      if (timeout !== undefined && Number.isFinite(timeout)) {
        // SET cannot take a bind parameter; the value is a clamped integer, never user text.
        const ms = Math.max(0, Math.floor(timeout));
        await sql.raw(`set local lock_timeout = '${ms}ms'`).execute(trx);
      }
      await sql`select pg_advisory_xact_lock(hashtext(${`kici:scaler:cap|${scalerName}`}))`.execute(trx);
      const row = await trx
        .selectFrom('scaler_spawning_agents')
        .select((eb) => eb.fn.countAll<string>().as('n'))
        .where('scaler_name', '=', scalerName)
        .where(PEER_ADOPTABLE_ROW)
        .executeTakeFirstOrThrow();
      return fn(lockView(trx, scalerName, Number(row.n)));
    });
}

function lockView(trx: Transaction<Database>, scalerName: string, count: number): ScalerCapLock {
  return {
    clusterActiveCount: count,
    async hasProvisionForJob(jobId) {
      const hit = await trx
        .selectFrom('scaler_spawning_agents')
        .select('agent_id')
        .where('scaler_name', '=', scalerName)
        .where('bound_job_id', '=', jobId)
        .executeTakeFirst();
      return hit !== undefined;
    },
    async reserve(r, reservation) {
      await insertSpawnRows(trx, r, reservation);
    },
  };
}
