import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestProject } from 'vitest/node';
import { openDatabase } from '../../src/store/open.js';
import { checkNoLeftovers, markTestRun } from './leftover-processes.js';

/**
 * A fresh PGlite data directory costs ~5 s (initdb). Make one migrated template per test run;
 * each test copies it (well under a second) instead.
 * Teardown fails the run when any process the tests started is still alive.
 */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const runId = markTestRun();
  const dir = await mkdtemp(join(tmpdir(), 'kici-template-'));
  const db = await openDatabase({ dataDir: dir });
  await db.close();
  project.provide('templateDataDir', dir);
  // Orchestrators in tests keep their bootstrap admin token here, not in the user's config dir;
  // workers and the processes they start inherit it. Each fresh database imports the same token.
  let tokenDir: string | undefined;
  if (!process.env.KICI_ADMIN_TOKEN_FILE) {
    tokenDir = await mkdtemp(join(tmpdir(), 'kici-etc-'));
    process.env.KICI_ADMIN_TOKEN_FILE = join(tokenDir, 'admin-token');
  }
  return async () => {
    await rm(dir, { recursive: true, force: true });
    if (tokenDir) await rm(tokenDir, { recursive: true, force: true });
    await checkNoLeftovers(runId);
  };
}

declare module 'vitest' {
  export interface ProvidedContext {
    templateDataDir: string;
  }
}
