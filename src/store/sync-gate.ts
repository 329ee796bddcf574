import type { Kysely } from 'kysely';
import type { Database } from './schema.js';

/**
 * The embedded database's syncs, with a way to hold some back for a moment.
 *
 * A commit on the embedded database writes its log to the file (the kernel has it from then on, so
 * a crash of this process loses nothing) and then syncs the file, which is most of its cost after
 * an idle spell. A job's assignment does not need to wait for that sync: what must wait is the
 * answer to whoever is told the job is safe (the submit's caller). So the commits that gate a job's
 * start run with their sync held (`hold`), the job leaves, and `flush` makes them durable before
 * anyone is answered. Only a loss of the host's power inside that window can undo a commit whose
 * job has left, and then nobody was told it was stored: the submitter was never answered, and the
 * agent that comes back with an unknown job is told to stop it.
 */
export class SyncGate {
  private holding = 0;
  /** Files whose sync was asked for while held, and has not happened since. */
  private readonly held = new Set<number>();
  private failure: Error | undefined;

  constructor(private readonly sync: (fd: number) => void) {}

  /** The file layer asks for `fd`'s writes to be durable. */
  onSync(fd: number): void {
    if (this.failure) throw this.failure;
    if (this.holding > 0) {
      this.held.add(fd);
      return;
    }
    this.syncOrFail(fd);
  }

  /** The file layer is about to close `fd`: a sync held for it happens now, while the number is still this file's. */
  onClose(fd: number): void {
    if (this.held.has(fd)) this.syncOrFail(fd);
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
   * Make every held sync happen. Throws when one fails; from then on every sync fails too, so the
   * database stops rather than go on over writes it cannot trust to be on disk.
   */
  flush(): void {
    for (const fd of [...this.held]) this.syncOrFail(fd);
  }

  /** How many files have a sync held (a view for tests). */
  get pending(): number {
    return this.held.size;
  }

  private syncOrFail(fd: number): void {
    if (this.failure) throw this.failure;
    try {
      this.sync(fd);
      this.held.delete(fd);
    } catch (err) {
      this.failure = err instanceof Error ? err : new Error(String(err));
      throw this.failure;
    }
  }
}

/** A write whose sync was held: what it returned, and the call that makes it durable. */
export interface HeldWrite<T> {
  value: T;
  /** Makes the write durable; throws when the disk refused (see SyncGate.flush). */
  durable(): void;
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
    if (!gate) return { value: await f(this.db), durable: () => undefined };
    const value = await this.db.connection().execute((conn) => gate.holdDuring(() => f(conn)));
    return { value, durable: () => gate.flush() };
  }
}
