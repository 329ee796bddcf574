import { statfs as fsStatfs } from 'node:fs/promises';
import { errorMessage, UserError } from '../util/errors.js';
import type { Logger } from '../util/logger.js';

const MiB = 1024 * 1024;
/**
 * The embedded database needs a whole 16 MiB log segment at a time, and spins instead of failing
 * when it cannot get one: writes stop well before that, and resume only once there is clearly
 * room again (so a disk at the edge does not flap).
 */
export const DEFAULT_MIN_FREE_BYTES = 256 * MiB;
export const RESUME_MARGIN_BYTES = 64 * MiB;

/** The two statfs fields read (numbers or bigints, as node returns either). */
export type StatfsFn = (path: string) => Promise<{ bavail: number | bigint; bsize: number | bigint }>;

export type DiskVerdict = { ok: true; freeBytes: number } | { ok: false; freeBytes: number; problem: string };

/** Pure: is the data dir too full, given the last answer (hysteresis) and the free bytes now? */
export function decideLow(wasLow: boolean, freeBytes: number, minFreeBytes: number): boolean {
  return wasLow ? freeBytes < minFreeBytes + RESUME_MARGIN_BYTES : freeBytes < minFreeBytes;
}

/** KICI_DATA_MIN_FREE_MB: whole MiB (0 turns the watch off); default 256. */
export function minFreeBytesFromEnv(env: NodeJS.ProcessEnv = process.env): number {
  const raw = env.KICI_DATA_MIN_FREE_MB;
  if (raw === undefined || raw.trim() === '') return DEFAULT_MIN_FREE_BYTES;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 0 || n > 1_048_576)
    throw new UserError(`KICI_DATA_MIN_FREE_MB: expected whole MiB from 0 to 1048576, got "${raw}"`);
  return n * MiB;
}

/**
 * Watches the free space of the data dir. While it is below the floor, /readyz answers 503 with
 * the reason and new runs are refused, so the database is never asked for space it cannot get;
 * agents keep their results and send them again once the server takes writes.
 */
export class DiskSpaceWatcher {
  private lowNow = false;
  private free = Number.POSITIVE_INFINITY;
  private timer: NodeJS.Timeout | undefined;
  private onChange: ((low: boolean) => void) | undefined;

  /** Tell `fn` of every change between low and ok. */
  whenChanged(fn: (low: boolean) => void): void {
    this.onChange = fn;
  }

  constructor(
    private readonly dir: string,
    private readonly log: Logger,
    private readonly minFreeBytes = minFreeBytesFromEnv(),
    private readonly statfs: StatfsFn = fsStatfs,
    private readonly intervalMs = 1000,
  ) {}

  start(): void {
    if (this.minFreeBytes === 0) return;
    this.running = true;
    void this.tick();
  }

  stop(): void {
    this.running = false;
    clearTimeout(this.timer);
    this.timer = undefined;
  }

  private running = false;

  /**
   * Close to the floor a burst of output can eat the rest within one interval: there the
   * figure is read ten times as often.
   */
  private async tick(): Promise<void> {
    await this.check();
    if (!this.running) return;
    const near = this.free < 2 * this.minFreeBytes + RESUME_MARGIN_BYTES;
    this.timer = setTimeout(() => void this.tick(), near ? Math.ceil(this.intervalMs / 10) : this.intervalMs);
    this.timer.unref();
  }

  get low(): boolean {
    return this.lowNow;
  }

  verdict(): DiskVerdict {
    if (!this.lowNow) return { ok: true, freeBytes: this.free };
    return {
      ok: false,
      freeBytes: this.free,
      problem:
        `data dir ${this.dir} has ${Math.floor(this.free / MiB)} MiB free, below the ${this.minFreeBytes / MiB} MiB ` +
        `floor (KICI_DATA_MIN_FREE_MB); new work waits until ${Math.ceil((this.minFreeBytes + RESUME_MARGIN_BYTES) / MiB)} MiB are free`,
    };
  }

  async check(): Promise<DiskVerdict> {
    try {
      const s = await this.statfs(this.dir);
      this.free = Number(s.bavail) * Number(s.bsize);
    } catch (err) {
      // An unreadable figure changes nothing: the store probe reports a data dir it cannot write.
      this.log.warn(
        { err: errorMessage(err), dir: this.dir },
        'could not read the free space of the data dir',
      );
      return this.verdict();
    }
    const next = decideLow(this.lowNow, this.free, this.minFreeBytes);
    if (next !== this.lowNow) {
      this.lowNow = next;
      const v = this.verdict();
      if (!v.ok) this.log.error({ freeBytes: this.free }, `${v.problem}; /readyz answers 503`);
      else this.log.info({ freeBytes: this.free }, 'data dir has room again; taking new work');
      this.onChange?.(next);
    }
    return this.verdict();
  }
}
