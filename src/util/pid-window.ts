import { readFileSync, readlinkSync } from 'node:fs';

/**
 * Which pids can belong to processes started after a given one, so that a job's end reads /proc
 * only for those instead of for every process on the host.
 *
 * The kernel hands out pids in increasing order, wrapping from `pid_max` back to a low bound, and
 * skips pids in use. Every process started after the job's first process therefore has a pid in the
 * cyclic range from that first pid to the last pid handed out, unless the counter went all the way
 * round in between. Going round means passing every pid value once, each either handed out (one
 * fork) or skipped (a task alive at that moment: one alive at the mark, or one forked since). So
 * while twice the forks since the mark plus the tasks alive at the mark stay below the size of the
 * cycle, it cannot have gone round; otherwise every pid is a candidate.
 */

/** The job's first process and the host's counters just before it was started. */
export interface PidMark {
  /** The pid of the first process started after the counters were read. */
  pid: number;
  /** Forks since boot (all namespaces), read before that process was started. */
  forks: number;
  /** Tasks (threads included) alive then. */
  tasks: number;
}

/** The counters now. */
export interface PidCounters {
  /** The last pid handed out in our pid namespace. */
  lastPid: number;
  forks: number;
  pidMax: number;
}

/** The lowest pid the counter wraps to (the kernel keeps the ones below for system daemons). */
const WRAP_FLOOR = 300;

/** The cyclic range of candidate pids, or undefined when any pid may be one (the counter may have gone round). */
export function pidWindow(mark: PidMark, now: PidCounters): { from: number; to: number } | undefined {
  const forks = now.forks - mark.forks;
  if (!(forks >= 0) || 2 * forks + mark.tasks >= now.pidMax - WRAP_FLOOR) return undefined;
  return { from: mark.pid, to: now.lastPid };
}

export function inPidWindow(pid: number, w: { from: number; to: number }): boolean {
  return w.from <= w.to ? pid >= w.from && pid <= w.to : pid >= w.from || pid <= w.to;
}

// --- Reading the counters (Linux). Each is undefined where /proc does not say. ---

let ownProc: boolean | undefined;
let pidMaxRead: number | undefined;

/** /proc shows our own pid namespace (else its pids and our counter do not match). */
function procIsOurs(): boolean {
  if (ownProc === undefined) {
    try {
      ownProc = readlinkSync('/proc/self') === String(process.pid);
    } catch {
      ownProc = false;
    }
  }
  return ownProc;
}

function readNumberFile(path: string, re: RegExp): number | undefined {
  try {
    const m = re.exec(readFileSync(path, 'latin1'));
    return m ? Number(m[1]) : undefined;
  } catch {
    return undefined;
  }
}

/** Read synchronously: these files are generated in memory, a read costs microseconds. */
function forksSinceBoot(): number | undefined {
  return readNumberFile('/proc/stat', /^processes (\d+)$/m);
}

/** `/proc/loadavg`: "1.0 0.5 0.2 running/tasks lastpid". */
function loadavg(): { tasks: number; lastPid: number } | undefined {
  try {
    const m = /\d+\/(\d+) (\d+)\s*$/.exec(readFileSync('/proc/loadavg', 'latin1'));
    return m ? { tasks: Number(m[1]), lastPid: Number(m[2]) } : undefined;
  } catch {
    return undefined;
  }
}

/** The counters for a mark, read just before its first process is started. */
export function markCounters(): Omit<PidMark, 'pid'> | undefined {
  if (!procIsOurs()) return undefined;
  const forks = forksSinceBoot();
  const l = loadavg();
  return forks === undefined || !l ? undefined : { forks, tasks: l.tasks };
}

/** The counters now: read after listing /proc, so every listed process is older than them. */
export function pidCounters(): PidCounters | undefined {
  if (!procIsOurs()) return undefined;
  pidMaxRead ??= readNumberFile('/proc/sys/kernel/pid_max', /^(\d+)/);
  const forks = forksSinceBoot();
  const l = loadavg();
  if (forks === undefined || !l || pidMaxRead === undefined) return undefined;
  return { lastPid: l.lastPid, forks, pidMax: pidMaxRead };
}
