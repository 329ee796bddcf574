import { startTicksOf } from '../../../util/proc-tree.js';

/**
 * A spare agent uid is claimed before any agent needs it, under an owner name no agent id can take
 * (agent ids never start with a dot), with a `holder` file naming the process that holds it: its
 * pid and start time, so a recycled pid is never mistaken for the holder.
 */
export const SPARE_PREFIX = '.spare-';

export function spareOwner(uid: number): string {
  return `${SPARE_PREFIX}${uid}`;
}

/** This process, as a spare claim's holder: `<pid> <start ticks>`. */
export function thisHolder(): string {
  return `${process.pid} ${startTicksOf(process.pid) ?? ''}`;
}

/** True while the process a holder file names still runs (same pid, same start time). */
export function holderAlive(holder: string): boolean {
  const [pid, ticks] = holder.trim().split(' ').map(Number);
  if (!pid || !Number.isInteger(pid) || ticks === undefined || !Number.isFinite(ticks)) return false;
  return startTicksOf(pid) === ticks;
}
