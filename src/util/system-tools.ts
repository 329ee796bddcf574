import { accessSync, constants, statSync } from 'node:fs';
import { delimiter, join } from 'node:path';

/**
 * System tools (nft, ip) live in the sbin directories, which a service's PATH often leaves out (a
 * systemd unit's `Environment=PATH=…`, a non-root login). They are searched after PATH, so a tool
 * that is installed is found, and one earlier on PATH still wins.
 */
export const SBIN_DIRS = ['/usr/local/sbin', '/usr/sbin', '/sbin'];

/**
 * PATH's directories, then the sbin directories PATH lacks. `KICI_SBIN_DIRS` (colon-separated)
 * replaces the sbin list; empty, only PATH is searched.
 */
export function toolSearchDirs(env: NodeJS.ProcessEnv = process.env): string[] {
  const dirs = (env.PATH ?? '').split(delimiter).filter(Boolean);
  const sbin =
    env.KICI_SBIN_DIRS === undefined ? SBIN_DIRS : env.KICI_SBIN_DIRS.split(delimiter).filter(Boolean);
  return [...dirs, ...sbin.filter((d) => !dirs.includes(d))];
}

function isExecutableFile(path: string): boolean {
  try {
    if (statSync(path).isDirectory()) return false;
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/**
 * The path to run `command` by: as given when it holds a `/`, else the first executable in
 * toolSearchDirs, else the bare name (so the spawn fails with ENOENT naming it).
 */
export function resolveTool(command: string, env: NodeJS.ProcessEnv = process.env): string {
  if (command.includes('/')) return command;
  for (const dir of toolSearchDirs(env)) {
    const candidate = join(dir, command);
    if (isExecutableFile(candidate)) return candidate;
  }
  return command;
}
