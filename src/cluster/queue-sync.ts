import pg from 'pg';
import { sql, type Kysely } from 'kysely';
import type { ResyncHint } from '../dispatch/job-rows.js';
import type { Database } from '../store/index.js';
import { errorMessage } from '../util/errors.js';
import { every, systemClock, type Clock, type TimerHandle } from '../util/clock.js';
import type { Logger } from '../util/logger.js';

export const QUEUED_CHANNEL = 'kici_jobs_queued';

export interface QueueSyncOptions {
  /** PostgreSQL URL for the LISTEN connection; without it only the poll runs. */
  url: string | undefined;
  /**
   * Re-read the queued rows into this instance's queue (Dispatcher.resyncQueued): only what the
   * hint names, or everything when there is none.
   */
  resync: (hint?: ResyncHint) => Promise<unknown>;
  /**
   * Other catch-ups that share the connection and the coalescing: each runs when its channel
   * rings, and all of them (those without a channel too) on a new connection and on every poll.
   * A queue wake-up runs none of them. `first` ones run before the queue's re-read (a lifted
   * backoff frees capacity the re-read can use), the rest after it.
   */
  catchUps?: readonly CatchUp[];
  /** Backstop: a full re-read this often even when no notification came. */
  pollMs: number;
  log: Logger;
  /** Paces the poll and the reconnect (the system clock unless a test drives it). */
  clock?: Clock;
}

/**
 * The shared queue's wake-up: every instance LISTENs on `kici_jobs_queued` (raised by a trigger
 * whenever a statement leaves a job queued) and re-reads the queued rows at once, so dispatch
 * latency across instances does not depend on a polling interval. The poll only covers a lost
 * notification (the LISTEN connection broke). Re-reads are coalesced: one runs at a time, and a
 * wake-up during one makes exactly one more.
 */
/**
 * What a notification on the queue channel names (the store's trigger): `from:<seq>` for a
 * statement that queued new jobs from that place on, `job:<id>` for one queued again. Anything else
 * (an older trigger's empty payload) asks for a full re-read.
 */
export function wakeOf(payload: string | undefined): Wake {
  const m = /^(from|job):(.+)$/.exec(payload ?? '');
  if (m?.[1] === 'from' && /^\d+$/.test(m[2]!)) return { fromSeq: Number(m[2]) };
  if (m?.[1] === 'job') return { ids: [m[2]!] };
  return 'full';
}

/** A reason to re-read: what changed, or 'full'. `{}` reads what was queued after the last row seen. */
export type Wake = ResyncHint | 'full';

export interface CatchUp {
  /** The NOTIFY channel that asks for it; without one it runs only with all the others. */
  channel?: string;
  run: () => Promise<unknown>;
  first?: boolean;
}

interface Pending {
  /** A queue re-read is due; `full` re-reads every queued row, else only what the hints name. */
  queue: boolean;
  full: boolean;
  fromSeq?: number;
  ids: Set<string>;
  /** Catch-ups whose channel rang, or 'all'. */
  catchUps: Set<string> | 'all';
}

const nothingPending = (): Pending => ({ queue: false, full: false, ids: new Set(), catchUps: new Set() });

export class QueueSync {
  private client: pg.Client | undefined;
  /** What the wake-ups since the last re-read asked for, merged. */
  private pending: Pending = nothingPending();
  private poll: TimerHandle | undefined;
  private reconnect: TimerHandle | undefined;
  private running: Promise<void> | undefined;
  private again = false;
  private stopped = false;

  constructor(private readonly opts: QueueSyncOptions) {}

  private get clock(): Clock {
    return this.opts.clock ?? systemClock;
  }

  start(): void {
    // Listening, a lost notification is only possible while the connection is down, and a new
    // connection re-reads everything: the poll then only looks after the last row it saw. Without
    // a LISTEN connection the poll is all there is, and reads everything. Either way the poll runs
    // every catch-up, which is also how changes that ring no channel (a peer's token) arrive.
    this.poll = every(this.clock, this.opts.pollMs, () => this.wake(this.opts.url ? {} : 'full', 'all'));
    if (this.opts.url) void this.listen();
  }

  /**
   * Re-read the queue now (coalesced): a full re-read unless told what changed. A full re-read, or
   * `catchUps: 'all'` (the poll), also runs every other catch-up; a channel's own one is `ring`.
   */
  wake(what: Wake = 'full', catchUps?: 'all'): void {
    const p = this.pending;
    p.queue = true;
    if (what === 'full') p.full = true;
    else {
      if (what.fromSeq !== undefined) p.fromSeq = Math.min(p.fromSeq ?? Infinity, what.fromSeq);
      for (const id of what.ids ?? []) p.ids.add(id);
    }
    // A full re-read is a fresh start: nothing another channel said can be taken as known.
    if (what === 'full' || catchUps === 'all') p.catchUps = 'all';
    this.kick();
  }

  /** A channel other than the queue's rang: run its catch-up alone (coalesced). */
  ring(channel: string): void {
    const p = this.pending;
    if (p.catchUps !== 'all') p.catchUps.add(channel);
    this.kick();
  }

  private kick(): void {
    if (this.stopped) return;
    if (this.running) {
      this.again = true;
      return;
    }
    this.running = (async () => {
      do {
        this.again = false;
        const p = this.pending;
        this.pending = nothingPending();
        // A queue wake-up alone (the hot path) starts its re-read without waiting a turn.
        const others = p.catchUps === 'all' || p.catchUps.size > 0;
        if (others) await this.catchUp(p, true);
        if (p.queue)
          await this.guard(
            this.opts.resync(p.full ? undefined : { fromSeq: p.fromSeq, ids: [...p.ids] }),
            'could not re-read the shared queue',
          );
        if (others) await this.catchUp(p, false);
      } while (this.again && !this.stopped);
    })().finally(() => (this.running = undefined));
  }

  private async catchUp(p: Pending, first: boolean): Promise<void> {
    for (const c of this.opts.catchUps ?? []) {
      if (!!c.first !== first) continue;
      if (p.catchUps === 'all' || (c.channel !== undefined && p.catchUps.has(c.channel)))
        await this.guard(c.run(), `could not catch up with ${c.channel ?? 'the cluster'}`);
    }
  }

  /** A failed re-read or catch-up is logged; the next wake-up or poll tries again. */
  private guard(work: Promise<unknown>, what: string): Promise<unknown> {
    return work.catch((err: unknown) => this.opts.log.warn({ err: errorMessage(err) }, what));
  }

  private async listen(): Promise<void> {
    const client = new pg.Client({
      connectionString: this.opts.url,
      keepAlive: true,
      connectionTimeoutMillis: 5_000,
    });
    const retry = () => {
      if (this.client !== client && this.client !== undefined) return;
      this.client = undefined;
      // Ending a connection that already broke: it is dropped either way.
      void client.end().catch(() => undefined);
      if (this.stopped || this.reconnect) return;
      this.reconnect = this.clock.setTimer(1_000, () => {
        this.reconnect = undefined;
        void this.listen();
      });
    };
    // A broken LISTEN connection must never be thrown (it would kill the process): reconnect.
    client.on('error', retry);
    client.on('end', retry);
    client.on('notification', (n) =>
      n.channel === QUEUED_CHANNEL ? this.wake(wakeOf(n.payload)) : this.ring(n.channel),
    );
    try {
      this.client = client;
      await client.connect();
      await client.query(`listen ${QUEUED_CHANNEL}`);
      for (const c of this.opts.catchUps ?? []) if (c.channel) await client.query(`listen ${c.channel}`);
      // Anything queued while we were not listening.
      this.wake();
    } catch (err) {
      this.opts.log.warn({ err: errorMessage(err) }, 'could not listen for queued jobs; retrying');
      retry();
    }
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.poll?.cancel();
    this.reconnect?.cancel();
    const client = this.client;
    this.client = undefined;
    // A LISTEN session holds no lock and no row: if its end fails (the connection already broke),
    // the server drops the session with the socket, and nothing is left to undo.
    await client?.end().catch(() => undefined);
    await this.running;
  }
}

/**
 * Take the right to scale for a queued job: one conditional update, so of several instances that
 * would spawn for it exactly one does. An owner that stopped heartbeating loses the right.
 */
export async function claimForScaling(
  db: Kysely<Database>,
  jobId: string,
  instanceId: string,
): Promise<'mine' | 'other' | 'gone'> {
  const res = await sql<{ scale_owner: string | null; state: string; mine: boolean }>`
    with claimed as (
      update jobs set scale_owner = ${instanceId}
       where id = ${jobId} and state = 'queued'
         and (scale_owner is null or scale_owner = ${instanceId} or not exists (
               select 1 from kici_instances i
                where i.id = jobs.scale_owner and i.stopped_at is null
                  and i.last_heartbeat > now() - 3 * i.heartbeat_ms * interval '1 millisecond'))
      returning id)
    select j.state, exists (select 1 from claimed) as mine from jobs j where j.id = ${jobId}`.execute(db);
  const row = res.rows[0];
  if (!row || row.state !== 'queued') return 'gone';
  return row.mine ? 'mine' : 'other';
}
