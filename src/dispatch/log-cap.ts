import type { LogLine } from '../store/logs-repo.js';
import { UserError } from '../util/errors.js';

/** Default stored log per job: 32 MiB. A build that prints more keeps its head and its tail. */
export const DEFAULT_JOB_LOG_MAX_BYTES = 32 * 1024 * 1024;
/** The tail is held in memory while the job runs, so it is bounded separately. */
export const MAX_TAIL_BYTES = 4 * 1024 * 1024;
const MIN_JOB_LOG_MAX_BYTES = 1024;

/** `KICI_JOB_LOG_MAX_BYTES`: a whole number of bytes, at least 1024. */
export function jobLogMaxBytesFromEnv(env: NodeJS.ProcessEnv = process.env): number {
  const raw = env.KICI_JOB_LOG_MAX_BYTES;
  if (raw === undefined || raw === '') return DEFAULT_JOB_LOG_MAX_BYTES;
  const n = Number(raw);
  if (!/^\d+$/.test(raw) || !Number.isSafeInteger(n) || n < MIN_JOB_LOG_MAX_BYTES)
    throw new UserError(
      `KICI_JOB_LOG_MAX_BYTES: a whole number of bytes, at least ${MIN_JOB_LOG_MAX_BYTES} (got ${JSON.stringify(raw.slice(0, 40))})`,
    );
  return n;
}

/** What one stored line costs against the cap: its UTF-8 bytes plus the line break it lost. */
export function lineCost(line: LogLine): number {
  return Buffer.byteLength(line.line, 'utf8') + 1;
}

/**
 * One job's share of the log cap. Lines go to the store until the head budget is spent; after
 * that they pass through a bounded ring and only the newest survive, to be written (after a
 * line saying what was dropped) when the job settles.
 */
export class JobLogBudget {
  private headBytes = 0;
  private cut = false;
  private tail: LogLine[] = [];
  private tailStart = 0;
  private tailBytes = 0;
  private droppedLines = 0;
  private droppedBytes = 0;

  constructor(
    private readonly headMax: number,
    private readonly tailMax: number,
  ) {}

  /**
   * Whether a line is stored now (`store`) or held in the tail; `firstDrop` is true the first
   * time a line is dropped, so the caller marks the job's log as truncated once.
   */
  admit(line: LogLine): { store: boolean; firstDrop: boolean } {
    const cost = lineCost(line);
    if (!this.cut && this.headBytes + cost <= this.headMax) {
      this.headBytes += cost;
      return { store: true, firstDrop: false };
    }
    this.cut = true;
    const hadDropped = this.droppedLines > 0;
    this.tail.push(line);
    this.tailBytes += cost;
    while (this.tailBytes > this.tailMax && this.tailStart < this.tail.length) {
      const old = this.tail[this.tailStart]!;
      this.tail[this.tailStart++] = undefined as unknown as LogLine;
      const c = lineCost(old);
      this.tailBytes -= c;
      this.droppedLines += 1;
      this.droppedBytes += c;
    }
    // Compact now and then so the ring's array does not grow with every evicted line.
    if (this.tailStart > 1024 && this.tailStart * 2 > this.tail.length) {
      this.tail = this.tail.slice(this.tailStart);
      this.tailStart = 0;
    }
    return { store: false, firstDrop: !hadDropped && this.droppedLines > 0 };
  }

  get truncated(): boolean {
    return this.droppedLines > 0;
  }

  /** The held tail, preceded by a system line about the gap when anything was dropped. */
  drain(jobId: string, capBytes: number): LogLine[] {
    const tail = this.tail.slice(this.tailStart);
    this.tail = [];
    this.tailStart = 0;
    this.tailBytes = 0;
    if (!this.truncated) return tail;
    const first = tail[0];
    const marker: LogLine = {
      jobId,
      stepIdx: null,
      stream: 'system',
      line:
        `log truncated: ${this.droppedLines} lines (${this.droppedBytes} bytes) were dropped here; ` +
        `a job keeps at most ${capBytes} bytes of log (KICI_JOB_LOG_MAX_BYTES), its head and its tail`,
      ts: first?.ts ?? new Date(),
    };
    return [marker, ...tail];
  }
}
