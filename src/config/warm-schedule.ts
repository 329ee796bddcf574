/**
 * Scheduled warm-pool sizes: each schedule entry is a cron moment that sets the pool's size until
 * another entry fires. The size in force at a time is the one of the entry that fired last at or
 * before it; the plain `size` holds while no entry has ever fired. Time-zone rules, including the
 * daylight-saving steps, are the cron library's: a local time skipped by a spring step fires at the
 * first instant after the gap, and a time repeated by an autumn step fires once.
 */
import { Cron } from 'croner';

export interface WarmScheduleEntry {
  cron: string;
  size: number;
  timezone: string;
}

/** A schedule with its patterns parsed once: reading the size at a time parses nothing. */
export interface CompiledWarmSchedule {
  readonly entries: readonly WarmScheduleEntry[];
  readonly crons: readonly Cron[];
}

export interface WarmSizeNow {
  size: number;
  /** The entry in force (its index), or null while the plain size holds. */
  entry: number | null;
}

export interface WarmChange {
  atMs: number;
  size: number;
  entry: number;
}

function cronFor(e: WarmScheduleEntry): Cron {
  // Paused: the orchestrator's own clock drives the pool; this object only answers questions.
  return new Cron(e.cron, { timezone: e.timezone, paused: true, mode: '5-part' });
}

/** Why a time-zone name is unusable, or undefined when the runtime knows it. */
export function timezoneProblem(timezone: string): string | undefined {
  try {
    new Intl.DateTimeFormat('en', { timeZone: timezone });
    return undefined;
  } catch {
    return `unknown time zone "${timezone}": use an IANA name such as Europe/Berlin or UTC`;
  }
}

/** Why a cron expression is unusable (five fields: minute hour day-of-month month day-of-week). */
export function cronProblem(cron: string): string | undefined {
  try {
    new Cron(cron, { paused: true, mode: '5-part' });
    return undefined;
  } catch (err) {
    const why = err instanceof Error ? err.message.replace(/^CronPattern:\s*/, '') : String(err);
    return `"${cron}" is not a five-field cron expression (minute hour day-of-month month day-of-week): ${why}`;
  }
}

export function compileWarmSchedule(entries: readonly WarmScheduleEntry[]): CompiledWarmSchedule {
  return { entries, crons: entries.map(cronFor) };
}

/** The size in force at `nowMs`. Of two entries that fire at the same instant, the later one wins. */
export function warmSizeAt(s: CompiledWarmSchedule, plainSize: number, nowMs: number): WarmSizeNow {
  let best: { at: number; entry: number } | undefined;
  // The reference of `previousRuns` is exclusive: one millisecond on makes "fired at now" count.
  const ref = new Date(nowMs + 1);
  s.crons.forEach((c, i) => {
    const at = c.previousRuns(1, ref)[0]?.getTime();
    if (at !== undefined && (!best || at >= best.at)) best = { at, entry: i };
  });
  return best ? { size: s.entries[best.entry]!.size, entry: best.entry } : { size: plainSize, entry: null };
}

/** The next moment after `nowMs` at which an entry fires, with the size it sets; null if none will. */
export function nextWarmChange(s: CompiledWarmSchedule, nowMs: number): WarmChange | null {
  let best: WarmChange | null = null;
  const ref = new Date(nowMs);
  s.crons.forEach((c, i) => {
    const at = c.nextRun(ref)?.getTime();
    if (at !== undefined && (!best || at < best.atMs || (at === best.atMs && i > best.entry)))
      best = { atMs: at, size: s.entries[i]!.size, entry: i };
  });
  return best;
}
