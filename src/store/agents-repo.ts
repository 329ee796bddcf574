import type { Kysely, Selectable } from 'kysely';
import type { AgentsTable, Database } from './schema.js';

export type AgentRow = Selectable<AgentsTable>;

export class AgentsRepo {
  /** The instance whose sockets this process records; rows are stamped with it (clustering). */
  private instanceId: string | undefined;

  constructor(private readonly db: Kysely<Database>) {}

  /** Several orchestrators share the table: name this one, so it only ever clears its own rows. */
  ownedBy(instanceId: string): void {
    this.instanceId = instanceId;
  }

  async connected(a: {
    id: string;
    kind: 'static' | 'scaler';
    labels: readonly string[];
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
      ...(this.instanceId !== undefined ? { instance_id: this.instanceId } : {}),
    };
    await this.db
      .insertInto('agents')
      .values(values)
      .onConflict((oc) => oc.column('id').doUpdateSet(values))
      .execute();
  }

  async gone(id: string, now: Date): Promise<void> {
    let q = this.db.updateTable('agents').set({ state: 'gone', disconnected_at: now }).where('id', '=', id);
    // The agent may already be back on a peer, which has stamped the row as its own.
    const self = this.instanceId;
    if (self !== undefined)
      q = q.where((eb) => eb.or([eb('instance_id', '=', self), eb('instance_id', 'is', null)]));
    await q.execute();
  }

  /**
   * At start-up none of this instance's sockets survive, whatever the table says. A peer's agents
   * are connected to the peer, so only this instance's rows (and unowned ones from before
   * clustering) are cleared.
   */
  async markAllGone(now: Date): Promise<void> {
    let q = this.db
      .updateTable('agents')
      .set({ state: 'gone', disconnected_at: now })
      .where('state', '=', 'connected');
    const self = this.instanceId;
    if (self !== undefined)
      q = q.where((eb) => eb.or([eb('instance_id', '=', self), eb('instance_id', 'is', null)]));
    await q.execute();
  }

  /** The leader's sweep: agents recorded by instances that are dead are no longer connected. */
  async markGoneOf(instanceIds: readonly string[], now: Date): Promise<void> {
    if (instanceIds.length === 0) return;
    await this.db
      .updateTable('agents')
      .set({ state: 'gone', disconnected_at: now })
      .where('state', '=', 'connected')
      .where('instance_id', 'in', instanceIds)
      .execute();
  }

  list(limit = 200): Promise<AgentRow[]> {
    return this.db.selectFrom('agents').selectAll().orderBy('connected_at', 'desc').limit(limit).execute();
  }
}
