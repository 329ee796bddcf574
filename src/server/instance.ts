import { randomBytes } from 'node:crypto';
import { chmod, mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

/** Read a small secret/identity file from the data dir, creating it (mode 0600) on first use. */
async function readOrCreate(dir: string, name: string, make: () => string): Promise<string> {
  await mkdir(dir, { recursive: true });
  const path = join(dir, name);
  try {
    const v = (await readFile(path, 'utf8')).trim();
    if (v) return v;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
  const value = make();
  await writeFile(path, value + '\n', { mode: 0o600, flag: 'w' });
  await chmod(path, 0o600);
  return value;
}

/** A stable id for this orchestrator, so a restart recognises its own spawn records. */
export function loadInstanceId(dataDir: string): Promise<string> {
  return readOrCreate(dataDir, 'instance-id', () => `orch-${randomBytes(6).toString('hex')}`);
}
