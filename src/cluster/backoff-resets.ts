import { sql, type Kysely } from 'kysely';
import type { Database } from '../store/index.js';
import { errorMessage } from '../util/errors.js';
import type { Logger } from '../util/logger.js';

export const BACKOFF_RESET_CHANNEL = 'kici_backoff_reset';

/** One operator's order to lift a scaler's backoff, as every instance applies it. */
export interface BackoffResetOrder {
  scaler: string;
  /** One label set (its labels joined by ","); absent: every one of the scaler. */
  labelSet?: string | undefined;
  /** The access token that asked (null for one without a name). */
  requestedBy: string | null;
  /** The instance the operator's request went to. */
  via: string;
  atMs: number;
}

/** Lift it in this instance's memory; returns the label sets that were backing off here. */
export type ApplyBackoffReset = (order: BackoffResetOrder) => string[];

export interface InstanceBackoffReset {
  instance: string;
  /** False when it did not answer in time (it still applies the order when it catches up). */
  answered: boolean;
  cleared: string[];
}

interface OrderRow {
  id: string;
  scaler: string;
  label_set: string | null;
  requested_by: string | null;
  via: string;
  requested_at: Date | string;
}

/**
 * `kici-admin scaler reset-backoff` on every instance: backoff lives in each instance's memory, so
 * the instance asked writes an order row and NOTIFYs; each instance (woken by the notification, or
 * by its poll on the heartbeat) applies every order newer than the last it saw, once, and writes
 * what it lifted. The asking instance waits a little for the live peers' answers and reports each.
 */
export class BackoffResetFanout {
  private lastSeen = 0;
  private chain: Promise<void> = Promise.resolve();
  /** What this instance lifted for an order it is answering the caller of. */
  private readonly local = new Map<number, string[]>();

  constructor(
    private readonly db: Kysely<Database>,
    private readonly instanceId: string,
    private readonly applyLocal: ApplyBackoffReset,
    private readonly alivePeers: () => Promise<string[]>,
    private readonly log: Logger,
    private readonly waitMs = 5_000,
  ) {}

  /** Orders made before this start are history: a fresh instance has no backoff to lift. */
  async init(): Promise<void> {
    const r = await sql<{ id: string | null }>`select max(id) as id from kici_backoff_resets`.execute(
      this.db,
    );
    this.lastSeen = Number(r.rows[0]?.id ?? 0);
  }

  async request(
    order: Omit<BackoffResetOrder, 'via'>,
  ): Promise<{ local: string[]; instances: InstanceBackoffReset[] }> {
    const at = new Date(order.atMs).toISOString();
    const r = await sql<{ id: string }>`
      with req as (
        insert into kici_backoff_resets (scaler, label_set, requested_by, via, requested_at)
        values (${order.scaler}, ${order.labelSet ?? null}, ${order.requestedBy}, ${this.instanceId}, ${at}::timestamptz)
        returning id)
      select id, pg_notify(${BACKOFF_RESET_CHANNEL}, id::text) from req`.execute(this.db);
    const id = Number(r.rows[0]!.id);
    this.local.set(id, []);
    const peers = await this.alivePeers();
    // Ours goes through the same serial path as a peer's, so orders apply in the same sequence.
    await this.catchUp();
    const local = this.local.get(id) ?? [];
    this.local.delete(id);
    const until = Date.now() + this.waitMs;
    let answers = new Map<string, string[]>();
    for (;;) {
      answers = await this.results(id);
      if (peers.every((p) => answers.has(p)) || Date.now() > until) break;
      await new Promise((res) => setTimeout(res, 50));
    }
    const instances = [this.instanceId, ...peers].map((instance) => {
      const cleared = instance === this.instanceId ? local : answers.get(instance);
      return { instance, answered: cleared !== undefined, cleared: cleared ?? [] };
    });
    return { local, instances };
  }

  /** Apply every order newer than the last one seen (notification or poll). */
  catchUp(): Promise<void> {
    const run = async () => {
      const rows = await sql<OrderRow>`
        select id, scaler, label_set, requested_by, via, requested_at
        from kici_backoff_resets where id > ${this.lastSeen} order by id`.execute(this.db);
      for (const row of rows.rows) await this.apply(row);
    };
    this.chain = this.chain.then(run).catch((err: unknown) => {
      this.log.warn({ err: errorMessage(err) }, 'could not apply a cluster backoff reset');
    });
    return this.chain;
  }

  private async apply(row: OrderRow): Promise<void> {
    const id = Number(row.id);
    if (id <= this.lastSeen) return;
    this.lastSeen = id;
    const cleared = this.applyLocal({
      scaler: row.scaler,
      labelSet: row.label_set ?? undefined,
      requestedBy: row.requested_by,
      via: row.via,
      atMs: new Date(row.requested_at).getTime(),
    });
    if (this.local.has(id)) this.local.set(id, cleared);
    await sql`
      insert into kici_backoff_reset_results (request_id, instance_id, cleared)
      values (${id}, ${this.instanceId}, ${JSON.stringify(cleared)})
      on conflict do nothing`.execute(this.db);
  }

  private async results(id: number): Promise<Map<string, string[]>> {
    const rows = await sql<{ instance_id: string; cleared: string[] }>`
      select instance_id, cleared from kici_backoff_reset_results where request_id = ${id}`.execute(this.db);
    return new Map(rows.rows.map((r) => [r.instance_id, r.cleared]));
  }
}
