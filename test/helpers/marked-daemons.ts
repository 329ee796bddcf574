import { randomInt } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';

/**
 * Daemons a step leaves behind in every way a process can escape its parent, each a `sleep` with a
 * unique duration so the test finds it in /proc by its command line alone (an env marker would not
 * survive `env -i`):
 *   1 setsid daemon, 2 double-forked grandchild (reparented to init), 3 own process group (`set -m`),
 *   4 (with `scrubbed`) setsid + empty environment: only a cgroup or the uid can still find it.
 */
export function daemonScript(scrubbed: boolean): { marker: string; script: string; count: number } {
  const marker = `7${randomInt(100_000, 999_999)}.`;
  const lines = [
    `setsid sh -c 'sleep ${marker}1' >/dev/null 2>&1 &`,
    `sh -c "sh -c 'sleep ${marker}2' >/dev/null 2>&1 &" &`,
    `sh -c 'set -m; sleep ${marker}3 >/dev/null 2>&1 &'`,
    ...(scrubbed ? [`env -i /usr/bin/setsid /bin/sleep ${marker}4 >/dev/null 2>&1 &`] : []),
    'sleep 0.5',
    'echo daemons-started',
    'sleep 2',
  ];
  return { marker, script: lines.join('\n'), count: scrubbed ? 4 : 3 };
}

/** Live (non-zombie) processes whose command line is a sleep carrying `marker`. */
export async function liveWithMarker(marker: string): Promise<number[]> {
  const out: number[] = [];
  for (const name of await readdir('/proc').catch(() => [] as string[])) {
    if (!/^\d+$/.test(name)) continue;
    const cmd = await readFile(`/proc/${name}/cmdline`, 'utf8').catch(() => '');
    if (!cmd.split('\0').some((a) => a.startsWith(marker))) continue;
    const stat = await readFile(`/proc/${name}/stat`, 'utf8').catch(() => '');
    if (stat && stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z') out.push(Number(name));
  }
  return out;
}

export function killAll(pids: number[]): void {
  for (const pid of pids) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }
}
