import { closeSync, openSync, readdirSync, readSync } from 'node:fs';
import { inPidWindow, pidCounters, pidWindow, type PidMark } from './pid-window.js';

/**
 * Finding and stopping processes that left their parent's process group (`setsid`, double fork,
 * `nohup`): they still carry the environment they were started with, so a marker variable set by
 * whoever launched them finds them in /proc. Linux only; elsewhere the scan finds nothing.
 *
 * The reads are synchronous: a /proc file is generated in memory, and the promise API spends far
 * more (an open, a stat, a read and a close, each a trip through the thread pool) than the read.
 * They also go into one buffer kept for them: /proc reports every file's size as 0, so a plain
 * read-the-whole-file call allocates a fresh 64 KiB buffer per file, and a teardown that reads a few
 * hundred of them left megabytes for the garbage collector while the next agent was starting.
 * A job's end looks at the processes started since its first one (pid-window.ts); where that cannot
 * be told, at every process on the host.
 */

export interface ProcMatch {
  /** `NAME=value` that must appear in the process's initial environment. */
  env?: string;
  /** Process groups whose members also match. */
  pgids?: ReadonlySet<number>;
  /**
   * Only processes started at or after this moment (clock ticks since boot, as `startTicksOf`
   * reads them) can carry the marker: older ones are not read for it. Most of a host's processes
   * are older. Taken from a process the marker was given to, so both are on the same clock.
   */
  bornFromTicks?: number | undefined;
  /**
   * Every matching process was started at or after this one (the job's first): only pids that can
   * be that young are read at all (pid-window.ts). Must be no later than `bornFromTicks`' process.
   */
  bornFromPid?: PidMark | undefined;
}

/** A process's start time (clock ticks since boot, as /proc keeps it), zombie or not. */
export function startTicksOf(pid: number): number | undefined {
  const t = readStat(pid)?.startTicks;
  return t !== undefined && Number.isFinite(t) ? t : undefined;
}

/**
 * Live pids matching `m` (never this process itself). A user process whose environment reads empty
 * is added to `unsure` when given: one in the middle of an exec shows none for a moment, so the
 * scan cannot tell whether it carries the marker.
 */
export async function findProcesses(m: ProcMatch, unsure?: number[]): Promise<number[]> {
  let names: string[];
  try {
    names = readdirSync('/proc');
  } catch {
    return [];
  }
  // Read after the listing, so every listed process is older than what they say.
  const counters = m.bornFromPid && pidCounters();
  const window = m.bornFromPid && counters ? pidWindow(m.bornFromPid, counters) : undefined;
  const out: number[] = [];
  let n = 0;
  for (const name of names) {
    if (!/^\d+$/.test(name)) continue;
    const pid = Number(name);
    if (pid === process.pid || (window && !inPidWindow(pid, window))) continue;
    // Give the event loop a turn now and then on a host with many processes.
    if (++n % 256 === 0) await new Promise((r) => setImmediate(r));
    const st = procStatOf(pid);
    if (!st) continue; // gone, or a zombie (nothing left to stop)
    if (m.pgids?.has(st.pgid)) {
      out.push(pid);
      continue;
    }
    if (m.bornFromTicks !== undefined && st.startTicks < m.bornFromTicks) continue;
    if (!m.env) continue;
    const env = readEnv(pid);
    if (env === undefined) continue;
    if (env.includes(m.env)) out.push(pid);
    else if (env.length === 1 && env[0] === '' && !st.kernel) unsure?.push(pid);
  }
  return out;
}

let scratch = Buffer.allocUnsafe(4096);

/**
 * A /proc file's whole text, read into the shared buffer (grown when a file does not fit). Throws
 * as `readFileSync` does for a gone or unreadable file. Exported for its test.
 */
export function readProcFile(path: string, encoding: 'latin1' | 'utf8' = 'latin1'): string {
  const fd = openSync(path, 'r');
  try {
    let len = 0;
    for (;;) {
      if (len === scratch.length) {
        const bigger = Buffer.allocUnsafe(scratch.length * 2);
        scratch.copy(bigger, 0, 0, len);
        scratch = bigger;
      }
      const n = readSync(fd, scratch, len, scratch.length - len, null);
      if (n === 0) {
        const text = scratch.toString(encoding, 0, len);
        // One huge environment must not stay resident for the orchestrator's whole life.
        if (scratch.length > 65_536) scratch = Buffer.allocUnsafe(4096);
        return text;
      }
      len += n;
    }
  } finally {
    closeSync(fd);
  }
}

/** The process's environment as it was at exec (`['']` when it reads empty). */
function readEnv(pid: number): string[] | undefined {
  try {
    return readProcFile(`/proc/${pid}/environ`).split('\0');
  } catch {
    return undefined; // gone, or not ours to read: neither can carry a marker we may act on
  }
}

/**
 * Live pids (never this process) whose session is `sid`: a process that left its group but not its
 * session (`set -m`) is still found. One stat read per process; a turn is given now and then.
 */
export async function pidsInSession(sid: number): Promise<number[]> {
  let names: string[];
  try {
    names = readdirSync('/proc');
  } catch {
    return []; // not Linux: the process group kill is all there is
  }
  const out: number[] = [];
  let n = 0;
  for (const name of names) {
    if (!/^\d+$/.test(name) || Number(name) === process.pid) continue;
    if (++n % 256 === 0) await new Promise((r) => setImmediate(r));
    const st = procStatOf(Number(name));
    if (st?.session === sid) out.push(Number(name));
  }
  return out;
}

/** The process group of a live process; undefined for a zombie or a vanished pid. */
export function processGroupOf(pid: number): number | undefined {
  return procStatOf(pid)?.pgid;
}

export interface ProcStat {
  state: string;
  ppid: number;
  pgid: number;
  session: number;
  startTicks: number;
  kernel: boolean;
}

/** Parent, group, session and start time of a live process; undefined for a zombie or a vanished pid. */
export function procStatOf(pid: number): ProcStat | undefined {
  const st = readStat(pid);
  return st && st.state !== 'Z' ? st : undefined;
}

/** The fields of /proc/<pid>/stat we use; undefined for a vanished pid. */
function readStat(pid: number): ProcStat | undefined {
  try {
    const stat = readProcFile(`/proc/${pid}/stat`);
    // Fields after the parenthesised command, from field 3: state, ppid, pgrp, session, ... flags
    // (9), ... starttime (22).
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return {
      state: fields[0] ?? '',
      ppid: Number(fields[1]),
      pgid: Number(fields[2]),
      session: Number(fields[3]),
      startTicks: Number(fields[19]),
      // PF_KTHREAD: a kernel thread has no environment at all, which is no sign of an exec.
      kernel: (Number(fields[6]) & 0x00200000) !== 0,
    };
  } catch {
    return undefined;
  }
}

function signal(pid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(pid, sig);
  } catch {
    // already gone
  }
}

/** Rescans for processes whose environment read empty (an exec in flight, or a process started with none). */
const UNSURE_RESCANS = 10;

/**
 * SIGTERM every matching process, wait up to `graceMs` for them to go, then SIGKILL whatever is
 * left. Each round rescans, so children forked during the teardown are caught too.
 * Resolves with how many processes were signalled.
 */
export async function stopProcesses(m: ProcMatch, graceMs = 3_000): Promise<number> {
  const seen = new Set<number>();
  let unsure: number[] = [];
  const scan = () => {
    unsure = [];
    return findProcesses(m, unsure);
  };
  const term = async () => {
    const pids = await scan();
    for (const pid of pids) {
      if (seen.has(pid)) continue;
      seen.add(pid);
      signal(pid, 'SIGTERM');
    }
    return pids;
  };
  let left = await term();
  const deadline = Date.now() + graceMs;
  while (left.length && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 25));
    left = await term();
  }
  // Repeat the kill until a scan comes back empty (bounded, in case something respawns forever). An
  // empty scan that met a process mid-exec is looked at again: that process may be one of ours
  // (a step's `setsid sh -c …` on a busy host was seen to outlive its job this way).
  let rescans = 0;
  for (let round = 0; round < 50; round++) {
    if (!left.length && (!unsure.length || rescans++ >= UNSURE_RESCANS)) break;
    for (const pid of left) signal(pid, 'SIGKILL');
    for (const pgid of m.pgids ?? []) signal(-pgid, 'SIGKILL');
    await new Promise((r) => setTimeout(r, 20));
    left = await scan();
  }
  return seen.size;
}
