import { fdatasync } from 'node:fs';
import type { Kysely } from 'kysely';
import type { Database } from './schema.js';

/** A sync run off the main thread (fdatasync on libuv's pool by default). */
export type SyncOffThread = (fd: number) => Promise<void>;

const fdatasyncOffThread: SyncOffThread = (fd) =>
  new Promise((ok, fail) => fdatasync(fd, (err) => (err ? fail(err) : ok())));

/**
 * The embedded database's syncs, with a way to hold some back for a moment.
 *
 * A commit on the embedded database writes its log to the file (the kernel has it from then on, so
 * a crash of this process loses nothing) and then syncs the file, which is most of its cost after
 * an idle spell, on the main thread. A job's start does not need to wait for that sync: what must
 * wait is the answer to whoever is told the job is safe (the submit's caller). So the commits that
 * gate a job's start run with their sync held (`holdDuring`), the job leaves (or its compute is
 * launched), and `flush` makes them durable off the main thread before anyone is answered. Only a
 * loss of the host's power inside that window can undo such a commit, and then nobody was told it
 * was stored: the submitter was never answered, and an agent that comes back with a job the store
 * does not know is told to stop it.
 */
export class SyncGate {
  private holding = 0;
  /** Files whose sync was asked for while held, and has not happened since. */
  private readonly held = new Set<number>();
  /** Files with a sync running off the main thread, and how many. */
  private readonly running = new Map<number, number>();
  /** Files closed (after a sync on the main thread) while a sync of theirs was still running. */
  private readonly closedWhileRunning = new Set<number>();
  /** The syncs running off the main thread. */
  private readonly inFlight = new Set<Promise<void>>();
  private failure: Error | undefined;

  constructor(
    private readonly sync: (fd: number) => void,
    private readonly syncOffThread: SyncOffThread = fdatasyncOffThread,
  ) {}

  /** The file layer asks for `fd`'s writes to be durable. */
  onSync(fd: number): void {
    if (this.failure) throw this.failure;
    if (this.holding > 0) {
      this.held.add(fd);
      return;
    }
    this.syncOrFail(fd);
  }

  /**
   * The file layer is about to close `fd`: a sync held or still running for it happens now, on the
   * main thread, while the number is still this file's (once closed it may name another file).
   */
  onClose(fd: number): void {
    if (!this.held.has(fd) && !this.running.has(fd)) return;
    if (this.running.has(fd)) this.closedWhileRunning.add(fd);
    this.syncOrFail(fd);
  }

  /** Run `f` with every sync it causes held until `flush`. */
  async holdDuring<T>(f: () => Promise<T>): Promise<T> {
    this.holding++;
    try {
      return await f();
    } finally {
      this.holding--;
    }
  }

  /**
   * Make every held sync happen, off the main thread. Rejects when one fails; from then on every
   * sync fails too, so the database stops rather than go on over writes it cannot trust to be on
   * disk.
   */
  async flush(): Promise<void> {
    if (this.failure) throw this.failure;
    for (const fd of this.held) this.inFlight.add(this.syncAway(fd));
    this.held.clear();
    // Every sync still running too: one another flush started may be the one that covers this
    // caller's write (its hold was taken from the same set).
    await Promise.all(this.inFlight);
    if (this.failure) throw this.failure;
  }

  /** How many files have a sync held (a view for tests). */
  get pending(): number {
    return this.held.size;
  }

  private syncAway(fd: number): Promise<void> {
    const p = this.syncAwayOnce(fd).finally(() => this.inFlight.delete(p));
    return p;
  }

  private async syncAwayOnce(fd: number): Promise<void> {
    this.running.set(fd, (this.running.get(fd) ?? 0) + 1);
    try {
      await this.syncOffThread(fd);
    } catch (err) {
      // Closed meanwhile: it was synced on the main thread first, and the number may be another file's now.
      if (!this.closedWhileRunning.has(fd)) this.fail(err);
    } finally {
      const left = this.running.get(fd)! - 1;
      if (left) this.running.set(fd, left);
      else {
        this.running.delete(fd);
        this.closedWhileRunning.delete(fd);
      }
    }
  }

  private syncOrFail(fd: number): void {
    if (this.failure) throw this.failure;
    try {
      this.sync(fd);
      this.held.delete(fd);
    } catch (err) {
      throw this.fail(err);
    }
  }

  private fail(err: unknown): Error {
    this.failure ??= err instanceof Error ? err : new Error(String(err));
    return this.failure;
  }
}

/** A write whose sync was held: what it returned, and the call that makes it durable. */
export interface HeldWrite<T> {
  value: T;
  /** Makes the write durable, off the main thread; rejects when the disk refused (see SyncGate.flush). */
  durable(): Promise<void>;
}

/**
 * Runs writes with their syncs held, on the one connection so that no other statement's commit is
 * held with them. Without a gate (PostgreSQL, or sync off) the writes run as they are and `durable`
 * has nothing left to do.
 */
export class HeldSync {
  constructor(
    private readonly db: Kysely<Database>,
    private readonly gate?: SyncGate,
  ) {}

  async run<T>(f: (db: Kysely<Database>) => Promise<T>): Promise<HeldWrite<T>> {
    const gate = this.gate;
    if (!gate) return { value: await f(this.db), durable: () => Promise.resolve() };
    const value = await this.db.connection().execute((conn) => gate.holdDuring(() => f(conn)));
    return { value, durable: () => gate.flush() };
  }
}
