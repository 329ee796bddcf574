import { readdirSync, readFileSync } from 'node:fs';
import { inPidWindow, pidCounters, pidWindow, type PidMark } from './pid-window.js';

/**
 * Finding and stopping processes that left their parent's process group (`setsid`, double fork,
 * `nohup`): they still carry the environment they were started with, so a marker variable set by
 * whoever launched them finds them in /proc. Linux only; elsewhere the scan finds nothing.
 *
 * The reads are synchronous: a /proc file is generated in memory, and the promise API spends far
 * more (an open, a stat, a read and a close, each a trip through the thread pool) than the read.
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

/** Live pids matching `m` (never this process itself). */
export async function findProcesses(m: ProcMatch): Promise<number[]> {
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
    const st = statOf(pid);
    if (!st) continue; // gone, or a zombie (nothing left to stop)
    if (m.pgids?.has(st.pgid)) {
      out.push(pid);
      continue;
    }
    if (m.bornFromTicks !== undefined && st.startTicks < m.bornFromTicks) continue;
    if (m.env && hasEnv(pid, m.env)) out.push(pid);
  }
  return out;
}

/** Does the process's environment (as it was at exec) contain `entry`? */
export function hasEnv(pid: number, entry: string): boolean {
  try {
    return readFileSync(`/proc/${pid}/environ`, 'latin1').split('\0').includes(entry);
  } catch {
    return false; // gone, or not ours to read
  }
}

/** The process group of a live process; undefined for a zombie or a vanished pid. */
export function processGroupOf(pid: number): number | undefined {
  return statOf(pid)?.pgid;
}

/** Process group and start time of a live process; undefined for a zombie or a vanished pid. */
function statOf(pid: number): { pgid: number; startTicks: number } | undefined {
  const st = readStat(pid);
  return st && st.state !== 'Z' ? st : undefined;
}

/** The fields of /proc/<pid>/stat we use; undefined for a vanished pid. */
function readStat(pid: number): { state: string; pgid: number; startTicks: number } | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'latin1');
    // Fields after the parenthesised command, from field 3: state, ppid, pgrp, ... starttime (22).
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return { state: fields[0] ?? '', pgid: Number(fields[2]), startTicks: Number(fields[19]) };
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

/**
 * SIGTERM every matching process, wait up to `graceMs` for them to go, then SIGKILL whatever is
 * left. Each round rescans, so children forked during the teardown are caught too.
 * Resolves with how many processes were signalled.
 */
export async function stopProcesses(m: ProcMatch, graceMs = 3_000): Promise<number> {
  const seen = new Set<number>();
  const term = async () => {
    const pids = await findProcesses(m);
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
  // Repeat the kill until a scan comes back empty (bounded, in case something respawns forever).
  for (let round = 0; left.length && round < 50; round++) {
    for (const pid of left) signal(pid, 'SIGKILL');
    for (const pgid of m.pgids ?? []) signal(-pgid, 'SIGKILL');
    await new Promise((r) => setTimeout(r, 20));
    left = await findProcesses(m);
  }
  return seen.size;
}
