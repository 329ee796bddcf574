/**
 * Renders a job's log for people: each step's lines between a header naming the step and a footer
 * with its exit code and duration. Works one poll at a time so `--follow` can use it as lines arrive.
 * Everything from the job is neutralised for the terminal, and its output cannot look like the
 * renderer's own frames or system lines (see safe-terminal.ts).
 */
import { escapeOutputLine, neutraliseTerminal } from './safe-terminal.js';

export interface LogLineView {
  id: number;
  step: number | null;
  stream: string;
  line: string;
  ts: string;
}

export interface StepView {
  idx: number;
  name: string;
  exitCode: number | null;
  timedOut: boolean;
  startedAt: string;
  finishedAt: string | null;
  durationMs: number | null;
}

export function formatDuration(ms: number | null | undefined): string {
  if (ms === null || ms === undefined) return '-';
  if (ms < 1000) return `${ms}ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)}s`;
  const s = Math.round(ms / 1000);
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, '0')}s`;
  return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, '0')}m`;
}

export function stepFooter(s: StepView): string {
  const name = neutraliseTerminal(s.name);
  if (s.timedOut) return `── step "${name}" timed out after ${formatDuration(s.durationMs)} ──`;
  return `── step "${name}" exited ${s.exitCode ?? '-'} in ${formatDuration(s.durationMs)} ──`;
}

export class LogRenderer {
  private readonly opened = new Set<number>();
  private readonly closed = new Set<number>();

  constructor(
    private readonly write: (line: string) => void,
    private readonly opts: { timestamps?: boolean; prefix?: string; totalSteps?: number } = {},
  ) {}

  /** How many steps the job has, for "step 2/3" (known once the job is read). */
  setTotalSteps(n: number | null | undefined): void {
    if (n) this.opts.totalSteps = n;
  }

  /**
   * One poll. `before` is the step list read before the lines, `after` the one read after: a step
   * finished in `before` has all its lines among these, so its footer can follow them.
   */
  feed(lines: LogLineView[], before: StepView[], after: StepView[]): void {
    const known = new Map(after.map((s) => [s.idx, s]));
    // Job-level lines (the agent's own output) reach the store by another path than step output,
    // so one can be stored before step lines that came earlier: within a poll, time decides.
    const byTime = [...lines].sort((a, b) => Date.parse(a.ts) - Date.parse(b.ts) || a.id - b.id);
    // Placing a job-level line may frame only steps read before the lines: their rows were stored
    // after their output, so that output is among these lines. A step first seen after the lines
    // may still have output on its way.
    const settled = new Map(before.map((s) => [s.idx, s]));
    for (const l of byTime) {
      if (l.step !== null) this.advanceTo(l.step, known);
      else this.catchUp(l.ts, before, settled);
      const text = l.stream === 'system' ? `» ${neutraliseTerminal(l.line)}` : escapeOutputLine(l.line);
      this.emit(text, l.ts);
    }
    const started = before.map((s) => s.idx);
    if (started.length) this.advanceTo(Math.max(...started), new Map(before.map((s) => [s.idx, s])));
    this.closeFinished(before);
  }

  /** The job is final: steps still open never finished (cancelled, lost agent). */
  end(steps: StepView[]): void {
    this.closeFinished(steps);
    for (const idx of [...this.opened].sort((a, b) => a - b)) {
      if (this.closed.has(idx)) continue;
      this.closed.add(idx);
      const s = steps.find((x) => x.idx === idx);
      this.emit(
        `── step "${neutraliseTerminal(s?.name ?? String(idx + 1))}" did not finish ──`,
        s?.startedAt,
      );
    }
  }

  /**
   * Job-level lines (provisioning, the agent's own output) carry no step: place them by time, after
   * the frames of steps that had started or finished when they arrived.
   */
  private catchUp(ts: string, steps: StepView[], known: Map<number, StepView>): void {
    const t = Date.parse(ts);
    for (const s of steps) if (Date.parse(s.startedAt) <= t) this.advanceTo(s.idx, known);
    this.closeFinished(steps.filter((s) => s.finishedAt !== null && Date.parse(s.finishedAt) <= t));
  }

  private advanceTo(k: number, known: Map<number, StepView>): void {
    for (let i = 0; i <= k; i++) {
      if (this.opened.has(i)) continue;
      // Step k has begun, so every step before it has ended; close them before opening the next.
      this.closeUpTo(i, known);
      const s = known.get(i);
      if (!s && i < k) continue; // never reported; nothing to frame
      this.opened.add(i);
      const total = this.opts.totalSteps ? `/${this.opts.totalSteps}` : '';
      const name = neutraliseTerminal(s?.name ?? `step ${i + 1}`);
      this.emit(`── step ${i + 1}${total} "${name}" ──`, s?.startedAt);
    }
  }

  private closeUpTo(k: number, known: Map<number, StepView>): void {
    for (const idx of [...this.opened].sort((a, b) => a - b)) {
      if (idx >= k || this.closed.has(idx)) continue;
      const s = known.get(idx);
      if (!s?.finishedAt) continue;
      this.closed.add(idx);
      this.emit(stepFooter(s), s.finishedAt);
    }
  }

  private closeFinished(steps: StepView[]): void {
    this.closeUpTo(Number.MAX_SAFE_INTEGER, new Map(steps.map((s) => [s.idx, s])));
  }

  private emit(text: string, ts: string | null | undefined): void {
    const time = this.opts.timestamps ? `${ts ? new Date(ts).toISOString() : '-'.padEnd(24)} ` : '';
    this.write(`${this.opts.prefix ?? ''}${time}${text}`);
  }
}
