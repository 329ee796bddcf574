import type { Kysely, Selectable } from 'kysely';
import type { ScalerEventDeliveriesTable } from '../../store/scaler-tables.js';
import type { Database } from '../../store/schema.js';

export type DeliveryRow = Selectable<ScalerEventDeliveriesTable>;
/** pending: not delivered yet (retrying); delivered: 2xx or job submitted; given-up: retries ran out. */
export type DeliveryState = 'pending' | 'delivered' | 'given-up';

/** The record of each scale event at each target: what `event list/show`, status and diagnose read. */
export class DeliveriesRepo {
  constructor(private readonly db: Kysely<Database>) {}

  async insert(r: {
    eventId: string;
    target: string;
    eventName: string;
    scalerName: string;
    agentId: string;
    reason: string | null;
    payload: Record<string, unknown>;
    now: Date;
  }): Promise<void> {
    await this.db
      .insertInto('scaler_event_deliveries')
      .values({
        event_id: r.eventId,
        target: r.target,
        event_name: r.eventName,
        scaler_name: r.scalerName,
        agent_id: r.agentId,
        reason: r.reason,
        payload: JSON.stringify(r.payload),
        state: 'pending',
        created_at: r.now,
        updated_at: r.now,
      })
      .execute();
  }

  async update(
    eventId: string,
    target: string,
    set: { state?: DeliveryState; attempts?: number; lastError?: string | null; jobId?: string },
    now: Date,
  ): Promise<void> {
    await this.db
      .updateTable('scaler_event_deliveries')
      .set({
        updated_at: now,
        ...(set.state !== undefined ? { state: set.state } : {}),
        ...(set.attempts !== undefined ? { attempts: set.attempts } : {}),
        ...(set.lastError !== undefined ? { last_error: set.lastError } : {}),
        ...(set.jobId !== undefined ? { job_id: set.jobId } : {}),
      })
      .where('event_id', '=', eventId)
      .where('target', '=', target)
      .execute();
  }

  list(opts: { limit?: number; eventName?: string; scalerName?: string } = {}): Promise<DeliveryRow[]> {
    let q = this.db.selectFrom('scaler_event_deliveries').selectAll();
    if (opts.eventName) q = q.where('event_name', '=', opts.eventName);
    if (opts.scalerName) q = q.where('scaler_name', '=', opts.scalerName);
    return q
      .orderBy('created_at', 'desc')
      .orderBy('event_id')
      .limit(opts.limit ?? 200)
      .execute();
  }

  get(eventId: string): Promise<DeliveryRow[]> {
    return this.db
      .selectFrom('scaler_event_deliveries')
      .selectAll()
      .where('event_id', '=', eventId)
      .orderBy('target')
      .execute();
  }

  /** The latest given-up delivery per scaler, for `scaler status` and `diagnose`. */
  async lastGivenUp(): Promise<Map<string, DeliveryRow>> {
    const rows = await this.db
      .selectFrom('scaler_event_deliveries')
      .selectAll()
      .where('state', '=', 'given-up')
      .orderBy('updated_at', 'desc')
      .limit(500)
      .execute();
    const out = new Map<string, DeliveryRow>();
    for (const r of rows) if (!out.has(r.scaler_name)) out.set(r.scaler_name, r);
    return out;
  }
}
