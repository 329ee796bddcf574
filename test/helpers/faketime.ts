/**
 * A wall-clock offset for one process through libfaketime, changed while it runs by rewriting a
 * file: the process sees its wall clock step, the host's and the monotonic clock do not move.
 */
import { existsSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const CANDIDATES = [
  '/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1',
  '/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1',
  '/usr/lib/faketime/libfaketime.so.1',
];

/** The library's path; throws naming the package to install when it is missing. */
export function libfaketime(): string {
  const found = CANDIDATES.find((p) => existsSync(p));
  if (!found)
    throw new Error('libfaketime not found: apt-get install faketime (scripts/system/setup.sh does)');
  return found;
}

export interface ClockOffset {
  /** Environment that puts a process on this offset. */
  env: NodeJS.ProcessEnv;
  /** Step the process's wall clock to `offset` from the real time: "+1h", "-1h", "+0". */
  set(offset: string): Promise<void>;
  close(): Promise<void>;
}

export async function clockOffset(initial = '+0'): Promise<ClockOffset> {
  const dir = await mkdtemp(join(tmpdir(), 'kici-faketime-'));
  const file = join(dir, 'offset');
  await writeFile(file, `${initial}\n`);
  return {
    env: {
      LD_PRELOAD: libfaketime(),
      FAKETIME_TIMESTAMP_FILE: file,
      // Read the file on every call, so a rewrite takes effect at once.
      FAKETIME_NO_CACHE: '1',
      // A real clock step moves the wall clock only; timers and liveness run on the monotonic one.
      FAKETIME_DONT_FAKE_MONOTONIC: '1',
    },
    set: (offset) => writeFile(file, `${offset}\n`),
    close: () => rm(dir, { recursive: true, force: true }),
  };
}
