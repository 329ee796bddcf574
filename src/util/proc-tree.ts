import { readdir, readFile } from 'node:fs/promises';

/**
 * Finding and stopping processes that left their parent's process group (`setsid`, double fork,
 * `nohup`): they still carry the environment they were started with, so a marker variable set by
 * whoever launched them finds them in /proc. Linux only; elsewhere the scan finds nothing.
 */

export interface ProcMatch {
  /** `NAME=value` that must appear in the process's initial environment. */
  env?: string;
  /** Process groups whose members also match. */
  pgids?: ReadonlySet<number>;
}

/** Live pids matching `m` (never this process itself). */
export async function findProcesses(m: ProcMatch): Promise<number[]> {
  let names: string[];
  try {
    names = await readdir('/proc');
  } catch {
    return [];
  }
  const out: number[] = [];
  for (const name of names) {
    if (!/^\d+$/.test(name)) continue;
    const pid = Number(name);
    if (pid === process.pid) continue;
    if (m.pgids?.size) {
      const pgid = await processGroupOf(pid);
      if (pgid !== undefined && m.pgids.has(pgid)) {
        out.push(pid);
        continue;
      }
    }
    if (m.env && (await hasEnv(pid, m.env))) out.push(pid);
  }
  return out;
}

/** Does the process's environment (as it was at exec) contain `entry`? */
export async function hasEnv(pid: number, entry: string): Promise<boolean> {
  try {
    const environ = await readFile(`/proc/${pid}/environ`, 'utf8');
    return environ.split('\0').includes(entry);
  } catch {
    return false; // gone, or not ours to read
  }
}

/** The process group of a live process; undefined for a zombie or a vanished pid. */
export async function processGroupOf(pid: number): Promise<number | undefined> {
  try {
    const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
    // Fields after the parenthesised command: state, ppid, pgrp, ...
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    if (fields[0] === 'Z') return undefined;
    return Number(fields[2]);
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
