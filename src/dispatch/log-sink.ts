import type { LogLine } from '../store/logs-repo.js';
import type { Store } from '../store/index.js';
import type { Logger } from '../util/logger.js';
import { errorMessage } from '../util/errors.js';
import { maskLine, maskPatterns } from '../jobs/secret-mask.js';
import { JobLogBudget, MAX_TAIL_BYTES, jobLogMaxBytesFromEnv } from './log-cap.js';

/** After this many rows in a row fail on their own, the store is down: stop retrying that batch. */
const MAX_ROW_FAILURES = 10;
/** Output kept in memory while writes are held; past it, lines are dropped and counted. */
export const HELD_MAX_BYTES = 64 * 1024 * 1024;
/** The most output one write takes. */
const SLICE_BYTES = 1024 * 1024;

/** Where the slice that starts at `from` ends: after `maxBytes` of text, at least one line. */
function sliceEnd(lines: readonly LogLine[], from: number, maxBytes: number): number {
  let bytes = 0;
  let i = from;
  while (i < lines.length && (i === from || bytes + lines[i]!.line.length <= maxBytes))
    bytes += lines[i++]!.line.length;
  return i;
}

/** A LogSink's bounds; each defaults as described. */
export interface LogSinkLimits {
  /** Stored log per job (default: KICI_JOB_LOG_MAX_BYTES, else DEFAULT_JOB_LOG_MAX_BYTES). */
  maxBytes?: number;
  /** Output kept in memory while writes are held (default HELD_MAX_BYTES). */
  heldMaxBytes?: number;
}

/**
 * Job output is written in batches: one insert per burst instead of one per line, so a chatty
 * build does not turn into thousands of tiny transactions. Each job's stored log is capped
 * (see log-cap.ts), and a batch that fails is retried per job and then per line, so one bad
 * line never costs another job its output.
 */
export class LogSink {
  private buffer: LogLine[] = [];
  private timer: NodeJS.Timeout | undefined;
  private flushing: Promise<void> = Promise.resolve();
  private readonly budgets = new Map<string, JobLogBudget>();
  /** Per job, what to mask in its lines (the values its run marks secret), longest first. */
  private readonly masks = new Map<string, string[]>();
  readonly maxBytes: number;
  private readonly tailMax: number;
  private readonly heldMaxBytes: number;

  constructor(
    private readonly store: Store,
    private readonly log: Logger,
    private readonly intervalMs = 100,
    limits: LogSinkLimits = {},
  ) {
    this.maxBytes = limits.maxBytes ?? jobLogMaxBytesFromEnv();
    this.tailMax = Math.min(Math.floor(this.maxBytes / 2), MAX_TAIL_BYTES);
    this.heldMaxBytes = limits.heldMaxBytes ?? HELD_MAX_BYTES;
  }

  #pushed = 0;
  /** Lines pushed so far: a cheap change marker for live views. */
  get pushed(): number {
    return this.#pushed;
  }
  private holdWrites: () => boolean = () => false;

  /**
   * While `held` answers true (the data dir is nearly full) nothing is written: lines wait in
   * memory, up to HELD_MAX_BYTES, and are written once it answers false again. Lines past the
   * bound are dropped, and a line in the job's log says how many.
   */
  holdWritesWhile(held: () => boolean): void {
    this.holdWrites = held;
  }
  private bufferBytes = 0;
  private readonly droppedWhileHeld = new Map<string, number>();

  /**
   * Mask these values in the job's lines from now on. Every line passes here before it is stored or
   * shown live, so neither the store nor any reader ever holds them.
   */
  protect(jobId: string, values: readonly string[]): void {
    const patterns = maskPatterns(values);
    if (patterns.length) this.masks.set(jobId, patterns);
  }

  push(lines: LogLine[]): void {
    this.#pushed += lines.length;
    for (const raw of lines) {
      const mask = this.masks.get(raw.jobId);
      const line = mask ? { ...raw, line: maskLine(raw.line, mask) } : raw;
      let budget = this.budgets.get(line.jobId);
      // Our own few system lines (e.g. spawn events for a queued job) need no budget: one made
      // for a job that never runs would never be released.
      if (!budget && line.stream === 'system') {
        this.buffer.push(line);
        continue;
      }
      if (!budget) {
        budget = new JobLogBudget(this.maxBytes - this.tailMax, this.tailMax);
        this.budgets.set(line.jobId, budget);
      }
      const { store, firstDrop } = budget.admit(line);
      if (store && this.bufferBytes > this.heldMaxBytes && this.holdWrites())
        this.droppedWhileHeld.set(line.jobId, (this.droppedWhileHeld.get(line.jobId) ?? 0) + 1);
      else if (store) {
        this.buffer.push(line);
        this.bufferBytes += line.line.length;
      }
      if (firstDrop)
        this.store.jobs.markLogTruncated(line.jobId).catch((err: unknown) => {
          this.log.error({ err: errorMessage(err), jobId: line.jobId }, 'could not mark a job log truncated');
        });
    }
    if (this.buffer.length >= 2000) void this.flush();
    else if (!this.timer && this.buffer.length) {
      this.timer = setTimeout(() => void this.flush(), this.intervalMs);
      this.timer.unref();
    }
  }

  /** The job settled: its held tail (and a line about any gap) joins the next write. */
  jobEnded(jobId: string): void {
    this.masks.delete(jobId);
    const budget = this.budgets.get(jobId);
    if (!budget) return;
    this.budgets.delete(jobId);
    this.buffer.push(...budget.drain(jobId, this.maxBytes));
  }

  /** Write everything buffered so far; resolves once it is in the store. */
  flush(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    if (this.holdWrites()) {
      this.retryLater();
      return this.flushing;
    }
    this.flushing = this.flushing.then(() => this.writeBuffered());
    return this.flushing;
  }

  /** Look again later; a stop while held drops the held lines and says so (see close). */
  private retryLater(): void {
    if (this.timer) return;
    this.timer = setTimeout(() => void this.flush(), Math.max(this.intervalMs, 500));
    this.timer.unref();
  }

  /**
   * Runs on the write chain, one at a time, and takes the buffer only when its turn comes: lines
   * put back in front of the buffer (below) are then always written before later ones.
   */
  private async writeBuffered(): Promise<void> {
    if (this.holdWrites()) return this.retryLater();
    this.noteDropped();
    const batch = this.buffer;
    this.buffer = [];
    this.bufferBytes = 0;
    // A large backlog (output held while the disk was full) goes in slices, each after a turn
    // of the event loop: the embedded database answers within the same turn, so back-to-back
    // writes would otherwise keep health checks and signals waiting on a busy server.
    for (let i = 0; i < batch.length;) {
      const end = sliceEnd(batch, i, SLICE_BYTES);
      await new Promise<void>((r) => setImmediate(r));
      // The disk can go low while a backlog is being written (the watcher reads it between
      // slices), and a slice the database then refuses for want of space would otherwise be
      // retried line by line and lost: the rest waits in memory again, in its place.
      if (
        this.holdWrites() ||
        !(await this.write(i === 0 && end === batch.length ? batch : batch.slice(i, end)))
      ) {
        const rest = batch.slice(i);
        this.buffer = rest.concat(this.buffer);
        for (const l of rest) this.bufferBytes += l.line.length;
        return this.retryLater();
      }
      i = end;
    }
  }

  /**
   * The server stops: write what is buffered. Output still held because the data dir is nearly
   * full cannot wait for space any more (it lives only in this process), and writing it now could
   * take the database's last room, which is what the hold is there to prevent. So it is dropped,
   * and each job it belonged to gets one short line saying how many lines are missing: a line as
   * small as the results that are still stored while the disk is low. Returns the dropped count per
   * job (empty when nothing was held), for the stop to log.
   */
  close(): Promise<Map<string, number>> {
    const closing = this.flushing.then(async () => {
      await this.writeBuffered();
      if (this.timer) clearTimeout(this.timer);
      this.timer = undefined;
      const dropped = new Map(this.droppedWhileHeld);
      this.droppedWhileHeld.clear();
      for (const l of this.buffer) dropped.set(l.jobId, (dropped.get(l.jobId) ?? 0) + 1);
      this.buffer = [];
      this.bufferBytes = 0;
      if (dropped.size)
        await this.write(
          [...dropped].map(([jobId, n]) => ({
            jobId,
            stepIdx: null,
            stream: 'system' as const,
            line: `${n} lines of output were not stored: the orchestrator stopped while the data dir was nearly full`,
            ts: new Date(),
          })),
        );
      return dropped;
    });
    this.flushing = closing.then(() => undefined);
    return closing;
  }

  /** One system line per job whose output was dropped while writes were held. */
  private noteDropped(): void {
    for (const [jobId, n] of this.droppedWhileHeld)
      this.buffer.push({
        jobId,
        stepIdx: null,
        stream: 'system',
        line: `${n} lines of output were dropped while the data dir was nearly full`,
        ts: new Date(),
      });
    this.droppedWhileHeld.clear();
  }

  /**
   * Store a batch; false when the store refused it while writes are now held (the disk went low
   * meanwhile): the caller keeps it. Otherwise a refused batch is retried job by job, then line
   * by line, and what still fails is logged and given up.
   */
  private async write(batch: LogLine[]): Promise<boolean> {
    try {
      await this.store.logs.append(batch);
      return true;
    } catch (err) {
      if (this.holdWrites()) return false;
      this.log.error(
        { err: errorMessage(err), lines: batch.length },
        'could not store a batch of job log lines; retrying job by job',
      );
    }
    const byJob = new Map<string, LogLine[]>();
    for (const l of batch) {
      const list = byJob.get(l.jobId);
      if (list) list.push(l);
      else byJob.set(l.jobId, [l]);
    }
    for (const [jobId, lines] of byJob) {
      if (byJob.size > 1) {
        try {
          await this.store.logs.append(lines);
          continue;
        } catch {
          // fall through to line by line
        }
      }
      await this.writeLineByLine(jobId, lines);
    }
    return true;
  }

  private async writeLineByLine(jobId: string, lines: LogLine[]): Promise<void> {
    let failedInARow = 0;
    let lost = 0;
    let lastError = '';
    for (let i = 0; i < lines.length; i++) {
      try {
        await this.store.logs.append([lines[i]!]);
        failedInARow = 0;
      } catch (err) {
        lost += 1;
        lastError = errorMessage(err);
        if (++failedInARow >= MAX_ROW_FAILURES) {
          lost += lines.length - i - 1;
          break;
        }
      }
    }
    if (lost) this.log.error({ jobId, lost, err: lastError }, 'job log lines could not be stored');
  }
}
