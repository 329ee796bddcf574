/**
 * Temporary directories a test file makes, removed when the file ends (temp-dirs-cleanup.ts, a
 * set-up file of every project): fixtures written for one test have no reason to outlive its run,
 * and a machine that runs the suites for months would otherwise collect them in its temp dir.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const made: string[] = [];

/** A fresh directory under the system's temp dir, named `<prefix><random>`. */
export async function tempDir(prefix: string): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), prefix));
  made.push(dir);
  return dir;
}

/**
 * Remove every directory made since the last call (whatever a test left in them). A process that
 * outlived its test may still be writing into one: the removal is retried, and a directory that
 * still cannot go is reported, not turned into a failure of tests that passed.
 */
export async function removeTempDirs(): Promise<void> {
  for (const dir of made.splice(0)) {
    await rm(dir, { recursive: true, force: true, maxRetries: 5, retryDelay: 50 }).catch((err: unknown) =>
      process.stderr.write(`temp dir ${dir} left behind: ${(err as Error).message}\n`),
    );
  }
}
