import { execFileSync } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export const MiB = 1024 * 1024;

const sh = (cmd: string, args: string[]) => execFileSync(cmd, args, { stdio: 'pipe' });

/** A small file system of its own, so that a test can really run the data dir out of space. */
export interface LoopDataDir {
  /** A scratch dir beside the mount (not on it): gates, marks, the image itself. */
  dir: string;
  /** Where the small file system is mounted. */
  mnt: string;
  /** Bytes free on the mount now, as an unprivileged writer sees them. */
  freeBytes(): number;
  /** Take space with a file `name` on the mount, so that about `leaveBytes` stay free. */
  fill(name: string, leaveBytes: number): void;
  /** Give back what `fill` took (every filler, whichever were made). */
  unfill(): Promise<void>;
  unmount(): Promise<void>;
}

/**
 * A loop-mounted ext4 image of `sizeMiB` (needs root), with no blocks reserved for root: the
 * orchestrator, which runs as root here, sees the same free space as the watcher's figure.
 */
export async function mountLoopDataDir(sizeMiB: number): Promise<LoopDataDir> {
  const dir = await mkdtemp(join(tmpdir(), 'kici-diskburst-'));
  const mnt = join(dir, 'mnt');
  const image = join(dir, 'fs.img');
  sh('truncate', ['-s', `${sizeMiB}M`, image]);
  sh('mkfs.ext4', ['-q', '-F', '-m', '0', image]);
  sh('mkdir', ['-p', mnt]);
  sh('mount', ['-o', 'loop', image, mnt]);
  const fillers = new Set<string>();
  const freeBytes = () =>
    Number(execFileSync('df', ['--output=avail', '-B1', mnt]).toString().split('\n')[1]);
  return {
    dir,
    mnt,
    freeBytes,
    fill(name, leaveBytes) {
      const path = join(mnt, name);
      sh('fallocate', ['-l', String(Math.max(freeBytes() - leaveBytes, MiB)), path]);
      fillers.add(path);
    },
    async unfill() {
      for (const path of fillers) await rm(path, { force: true });
      fillers.clear();
    },
    async unmount() {
      try {
        sh('umount', [mnt]);
      } catch {
        sh('umount', ['-l', mnt]);
      }
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/**
 * Ask `${url}/healthz` every 200 ms until stopped: every answer must be a 200 within 5 s. `phase`
 * names what the test was doing, for the report of a bad answer.
 */
export function watchHealth(url: string) {
  const health = { asked: 0, bad: [] as string[], phase: 'start' };
  let watching = true;
  const loop = (async () => {
    while (watching) {
      const t0 = Date.now();
      const status = await fetch(`${url}/healthz`, { signal: AbortSignal.timeout(5_000) }).then(
        (r) => r.status,
        (e: unknown) => String(e),
      );
      health.asked++;
      if (status !== 200 || Date.now() - t0 > 5_000)
        health.bad.push(`${status} after ${Date.now() - t0} ms (${health.phase})`);
      await new Promise((r) => setTimeout(r, 200));
    }
  })();
  return Object.assign(health, {
    /** Stop asking; resolves after the question in flight. */
    async stop() {
      watching = false;
      await loop;
      return { asked: health.asked, bad: health.bad };
    },
  });
}
