import { readFile, readlink } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';

/** Is `pid` a live (non-zombie) process? */
export async function pidAlive(pid: number): Promise<boolean> {
  if (!Number.isInteger(pid) || pid <= 0) return false;
  try {
    const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    return false;
  }
}

/**
 * The kernel's start time of `pid` (/proc/<pid>/stat field 22, clock ticks since boot): with the pid
 * it names one process for the life of the host, so a recycled pid is told apart from ours.
 */
export async function procStartTime(pid: number): Promise<string | undefined> {
  try {
    const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
    // Fields after the command name (which may hold spaces) start at field 3.
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[22 - 3];
  } catch {
    return undefined;
  }
}

/**
 * Is `pid` a VMM of `comm` started for the VM in `dir`? When the VM's pid file recorded a start time,
 * `pid` must be that very process (not a recycled pid, even one with the same command line). Every
 * VMM we start names its VM directory on its command line, or (jailed) has it as its root.
 */
export async function vmmOwns(
  pid: number,
  dir: string,
  comms: readonly string[],
  recorded?: { pid: number; start?: string | undefined },
): Promise<boolean> {
  if (!(await pidAlive(pid))) return false;
  if (recorded) {
    if (recorded.pid !== pid) return false;
    if (recorded.start !== undefined && (await procStartTime(pid)) !== recorded.start) return false;
  }
  try {
    const comm = (await readFile(`/proc/${pid}/comm`, 'utf8')).trim();
    if (!comms.some((c) => comm.startsWith(c.slice(0, 15)))) return false;
    const cmdline = (await readFile(`/proc/${pid}/cmdline`, 'utf8')).split('\0');
    if (cmdline.some((arg) => arg.includes(`${dir}/`))) return true;
    // Jailed: the command line has only in-jail paths, but the process root is the VM directory.
    return (await readlink(`/proc/${pid}/root`).catch(() => '')) === dir;
  } catch {
    return false;
  }
}

/** Wait until `pid` is gone, up to `ms`; true when it is. */
export async function waitGone(pid: number, ms: number): Promise<boolean> {
  const until = Date.now() + ms;
  while (Date.now() < until) {
    if (!(await pidAlive(pid))) return true;
    await sleep(50);
  }
  return !(await pidAlive(pid));
}

/** SIGKILL and wait for it to be gone (a VMM holds the TAP until it has exited). */
export async function killAndWait(pid: number): Promise<void> {
  try {
    process.kill(pid, 'SIGKILL');
  } catch {
    return; // already gone
  }
  await waitGone(pid, 5_000);
}
