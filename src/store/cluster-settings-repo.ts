import type { Kysely } from 'kysely';
import {
  clusterKeyOf,
  type ClusterChanges,
  type ClusterOverrides,
  type ClusterSettingKey,
} from '../config/cluster-settings.js';
import type { Database } from './schema.js';

/** The `cluster_settings` rows: one per setting that has a cluster-wide value. */
export class ClusterSettingsRepo {
  constructor(private readonly db: Kysely<Database>) {}

  /** Every stored value; rows under names this version does not know are left out. */
  async read(): Promise<ClusterOverrides> {
    const rows = await this.db.selectFrom('cluster_settings').select(['key', 'value']).execute();
    const out: ClusterOverrides = {};
    for (const r of rows) {
      const key = clusterKeyOf(r.key);
      if (key) out[key] = Number(r.value);
    }
    return out;
  }

  /** Apply a change in one transaction: numbers are stored, null removes the row. */
  async write(changes: ClusterChanges, by: string | null, at: Date): Promise<void> {
    await this.db.transaction().execute(async (tx) => {
      for (const [key, value] of Object.entries(changes) as [ClusterSettingKey, number | null][]) {
        if (value === null) await tx.deleteFrom('cluster_settings').where('key', '=', key).execute();
        else
          await tx
            .insertInto('cluster_settings')
            .values({ key, value, updated_at: at, updated_by: by })
            .onConflict((oc) => oc.column('key').doUpdateSet({ value, updated_at: at, updated_by: by }))
            .execute();
      }
    });
  }
}
