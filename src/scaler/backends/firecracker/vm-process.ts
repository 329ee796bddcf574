import { readFile } from 'node:fs/promises';
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
 * Is `pid` a VMM of `comm` started for the VM in `dir`? Every VMM we start names its VM directory on
 * its command line, so a recycled pid (another program, or another VM's VMM) does not match.
 */
export async function vmmOwns(pid: number, dir: string, comms: readonly string[]): Promise<boolean> {
  if (!(await pidAlive(pid))) return false;
  try {
    const comm = (await readFile(`/proc/${pid}/comm`, 'utf8')).trim();
    if (!comms.some((c) => comm.startsWith(c.slice(0, 15)))) return false;
    const cmdline = (await readFile(`/proc/${pid}/cmdline`, 'utf8')).split('\0');
    return cmdline.some((arg) => arg.includes(`${dir}/`));
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
