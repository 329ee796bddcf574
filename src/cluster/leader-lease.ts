import pg from 'pg';
import { errorMessage } from '../util/errors.js';
import type { Logger } from '../util/logger.js';
import { every, monoNow, systemClock, type Clock, type TimerHandle } from '../util/clock.js';

/** Who does the leader-only work; `onChange` hears every gain and loss, at once. */
export interface LeaderLease {
  isLeader(): boolean;
  onChange(listener: (leader: boolean) => void): void;
  start(): void;
  stop(): Promise<void>;
}

/** ('kici', 1): the two-int advisory-lock key space keeps us apart from other users' int8 keys. */
const LOCK_CLASS = 0x6b696369;
const LOCK_LEADER = 1;
/** Intervals a lease that lost leadership waits before trying again: its peers get two tries first. */
const SIT_OUT_INTERVALS = 2;

/** The embedded store has one instance by construction: it leads from start to stop. */
export class SoleLeader implements LeaderLease {
  private leader = false;
  private readonly listeners: ((leader: boolean) => void)[] = [];
  isLeader(): boolean {
    return this.leader;
  }
  onChange(listener: (leader: boolean) => void): void {
    this.listeners.push(listener);
  }
  start(): void {
    this.leader = true;
    for (const l of this.listeners) l(true);
  }
  stop(): Promise<void> {
    if (this.leader) for (const l of this.listeners) l(false);
    this.leader = false;
    return Promise.resolve();
  }
}

export interface PgLeaderLeaseOptions {
  url: string;
  /** How often a follower tries the lock and a leader checks its connection (the heartbeat). */
  intervalMs: number;
  /** Connect and query budget on the lease connection ("lock time" in the failover bound). */
  lockTimeoutMs: number;
  log: Logger;
  /** Paces the ticks (the system clock unless a test drives it). */
  clock?: Clock;
}

/**
 * Leadership as a session advisory lock held on a dedicated connection (not the pool: a pooled
 * connection is shared and recycled, and the lock would travel with it).
 *
 * PostgreSQL frees the lock the moment the session ends, so a leader that dies (kill -9 closes its
 * socket) is replaced within one interval plus the lock time. The leader stops leading the moment
 * its connection reports an error or end, or a liveness check does not answer within the lock
 * time; so it gives up within 2 intervals of the path breaking. The server is told (per session
 * keepalives) to drop a silent peer only after longer than that, so two leaders never overlap.
 *
 * A leader that lost the lease sits out SIT_OUT_INTERVALS intervals before it tries again. Its timer
 * fires in step with its peers', and with a fresh connection to open it could otherwise take the
 * lock straight back from a peer whose own connection dropped in the same hiccup.
 */
export class PgLeaderLease implements LeaderLease {
  private client: pg.Client | undefined;
  private leader = false;
  private timer: TimerHandle | undefined;
  private stopped = false;
  private ticking: Promise<void> | undefined;
  /** Monotonic ms before which a lease that just lost leadership does not try for it. */
  private sitOutUntil = 0;
  private readonly listeners: ((leader: boolean) => void)[] = [];

  constructor(private readonly opts: PgLeaderLeaseOptions) {}

  isLeader(): boolean {
    return this.leader;
  }

  onChange(listener: (leader: boolean) => void): void {
    this.listeners.push(listener);
  }

  start(): void {
    void this.tick();
    this.timer = every(this.clock(), this.opts.intervalMs, () => void this.tick());
  }

  private clock(): Clock {
    return this.opts.clock ?? systemClock;
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.timer?.cancel();
    // A tick in flight could otherwise connect and take the lock after we let go of it.
    await this.ticking;
    const client = this.client;
    this.client = undefined;
    // Deposed first, so leader-only work stops before the lock can pass to a peer.
    this.set(false);
    if (client) {
      await withTimeout(
        client.query('select pg_advisory_unlock($1, $2)', [LOCK_CLASS, LOCK_LEADER]),
        this.opts.lockTimeoutMs,
      ).catch(() => undefined); // closing the session frees it anyway
      // An end that fails or hangs: the server drops the silent session within the keepalive bound
      // set in connect(), and the lock with it; peers take over then, as after a crash.
      await withTimeout(client.end(), this.opts.lockTimeoutMs).catch(() => undefined);
    }
  }

  private set(leader: boolean): void {
    if (this.leader === leader) return;
    this.leader = leader;
    for (const l of this.listeners) l(leader);
  }

  /** Leadership ends now; the connection is dropped (its session, and the lock, end with it). */
  private lose(why: string): void {
    const client = this.client;
    this.client = undefined;
    if (this.leader) {
      this.opts.log.warn({ why }, 'cluster leadership lost; leader-only work stopped');
      this.sitOutUntil = monoNow(this.clock()) + SIT_OUT_INTERVALS * this.opts.intervalMs;
    }
    this.set(false);
    // Ending a connection that already broke: it is dropped either way.
    if (client) void client.end().catch(() => undefined);
  }

  private async connect(): Promise<pg.Client> {
    const client = new pg.Client({
      connectionString: this.opts.url,
      connectionTimeoutMillis: this.opts.lockTimeoutMs,
      keepAlive: true,
    });
    // Without a listener a broken socket would be thrown and kill the process.
    client.on('error', (err) => {
      if (this.client === client) this.lose(`lease connection error: ${errorMessage(err)}`);
    });
    client.on('end', () => {
      if (this.client === client) this.lose('lease connection ended');
    });
    try {
      await client.connect();
      // The server gives a silent peer up only after the leader has surely noticed (2 intervals).
      const idleS = Math.max(1, Math.ceil((2 * this.opts.intervalMs) / 1000));
      await withTimeout(
        client.query(
          `select set_config('tcp_keepalives_idle', $1, false),
                  set_config('tcp_keepalives_interval', '1', false),
                  set_config('tcp_keepalives_count', '2', false)`,
          [String(idleS)],
        ),
        this.opts.lockTimeoutMs,
      );
    } catch (err) {
      // Ending a connection that already broke: the lock attempt's own error is what is thrown.
      void client.end().catch(() => undefined);
      throw err;
    }
    return client;
  }

  private tick(): Promise<void> {
    if (this.ticking || this.stopped) return this.ticking ?? Promise.resolve();
    this.ticking = this.tryLead().finally(() => (this.ticking = undefined));
    return this.ticking;
  }

  private async tryLead(): Promise<void> {
    if (!this.leader && monoNow(this.clock()) < this.sitOutUntil) return;
    try {
      if (this.leader && this.client) {
        // Still holding the session? An answer within the lock time says yes.
        await withTimeout(this.client.query('select 1'), this.opts.lockTimeoutMs);
        return;
      }
      this.client ??= await this.connect();
      const res = await withTimeout(
        this.client.query<{ ok: boolean }>('select pg_try_advisory_lock($1, $2) as ok', [
          LOCK_CLASS,
          LOCK_LEADER,
        ]),
        this.opts.lockTimeoutMs,
      );
      if (this.stopped) return;
      if (res.rows[0]?.ok) {
        this.opts.log.info('cluster leadership acquired');
        this.set(true);
      }
    } catch (err) {
      this.lose(`lease check failed: ${errorMessage(err)}`);
    }
  }
}

function withTimeout<T>(p: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms);
  });
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer));
}
