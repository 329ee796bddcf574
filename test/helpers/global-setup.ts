import { mkdtempSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestProject } from 'vitest/node';
import { makeTestTemplate, TEMPLATE_ENV } from '../../scripts/test-template.ts';
import { openDatabase } from '../../src/store/open.js';
import { checkNoLeftovers, markTestRun } from './leftover-processes.js';

/**
 * A fresh PGlite data directory costs ~5 s (initdb). Make one migrated template per test run, and
 * one uncompressed dump of it: on-disk tests copy the template, in-memory stores load the dump
 * (no initdb, no copy). A runner that starts several vitest processes makes one for all of them
 * (scripts/test-template.ts). Every project names this file, and vitest runs each project's global
 * set-up in the same runner process: the template is made (or found) by the first and shared, and
 * the last teardown removes one made here and fails the run when any process the tests started is
 * still alive.
 */
interface Shared {
  ready: Promise<{ dir: string; dump: string; own: boolean }>;
  users: number;
  runId: string;
  tokenDir: string | undefined;
}
const KEY = Symbol.for('kici.test.template');
const shared = globalThis as typeof globalThis & { [KEY]?: Shared };

/** The run's template: the one its runner made, else one made here (and removed at the end). */
async function template(): Promise<{ dir: string; dump: string; own: boolean }> {
  const named = process.env[TEMPLATE_ENV];
  const dir = named || (await makeTestTemplate(openDatabase));
  return { dir, dump: join(dir, 'dump.tar'), own: !named };
}

/**
 * Orchestrators in tests keep their bootstrap admin token in a file of the run's own, not in the
 * user's config dir; workers and the processes they start inherit the variable, and each fresh
 * database imports the same token. Returns the directory this run made, if it made one.
 */
function useTestTokenFile(): string | undefined {
  if (process.env.KICI_ADMIN_TOKEN_FILE) return undefined;
  const dir = mkdtempSync(join(tmpdir(), 'kici-etc-'));
  process.env.KICI_ADMIN_TOKEN_FILE = join(dir, 'admin-token');
  return dir;
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const s = (shared[KEY] ??= {
    ready: template(),
    users: 0,
    runId: markTestRun(),
    tokenDir: useTestTokenFile(),
  });
  s.users++;
  const { dir, dump, own } = await s.ready;
  project.provide('templateDataDir', dir);
  project.provide('templateDump', dump);
  return async () => {
    if (--s.users > 0) return;
    delete shared[KEY];
    if (own) await rm(dir, { recursive: true, force: true });
    if (s.tokenDir) await rm(s.tokenDir, { recursive: true, force: true });
    await checkNoLeftovers(s.runId);
  };
}

declare module 'vitest' {
  export interface ProvidedContext {
    templateDataDir: string;
    /** A tarball of the template's database (PGlite's dumpDataDir), for in-memory stores. */
    templateDump: string;
  }
}
