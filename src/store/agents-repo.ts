import type { Kysely, Selectable } from 'kysely';
import type { AgentsTable, Database } from './schema.js';

export type AgentRow = Selectable<AgentsTable>;

export class AgentsRepo {
  constructor(private readonly db: Kysely<Database>) {}

  async connected(a: {
    id: string;
    kind: 'static' | 'scaler';
    labels: string[];
    scalerName: string | null;
    hostname: string | null;
    version: string | null;
    now: Date;
  }): Promise<void> {
    const values = {
      id: a.id,
      kind: a.kind,
      labels: JSON.stringify(a.labels),
      scaler_name: a.scalerName,
      state: 'connected' as const,
      hostname: a.hostname,
      version: a.version,
      connected_at: a.now,
      last_seen_at: a.now,
      disconnected_at: null,
    };
    await this.db
      .insertInto('agents')
      .values(values)
      .onConflict((oc) => oc.column('id').doUpdateSet(values))
      .execute();
  }

  async gone(id: string, now: Date): Promise<void> {
    await this.db
      .updateTable('agents')
      .set({ state: 'gone', disconnected_at: now })
      .where('id', '=', id)
      .execute();
  }

  /** At start-up no socket survives, whatever the table says. */
  async markAllGone(now: Date): Promise<void> {
    await this.db
      .updateTable('agents')
      .set({ state: 'gone', disconnected_at: now })
      .where('state', '=', 'connected')
      .execute();
  }

  list(limit = 200): Promise<AgentRow[]> {
    return this.db.selectFrom('agents').selectAll().orderBy('connected_at', 'desc').limit(limit).execute();
  }
}
