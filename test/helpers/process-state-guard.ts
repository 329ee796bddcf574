/**
 * Files of a project that shares one process between files (vitest's `isolate: false`) start from
 * the same process-wide state as a fresh process would: the environment, the umask and the working
 * directory a file changed are put back when it ends. An in-process orchestrator sets umask 077 for
 * its data dir, for one; the next file's test files would otherwise be created mode 0600.
 */
import { afterAll, beforeAll } from 'vitest';

let env: NodeJS.ProcessEnv = {};
let umask = 0o022;
let cwd = process.cwd();

beforeAll(() => {
  env = { ...process.env };
  // Reading the umask means setting it: set the usual one, and keep what it was.
  umask = process.umask(0o022);
  process.umask(umask);
  cwd = process.cwd();
});

afterAll(() => {
  for (const k of Object.keys(process.env)) if (!(k in env)) delete process.env[k];
  Object.assign(process.env, env);
  process.umask(umask);
  if (process.cwd() !== cwd) process.chdir(cwd);
});
