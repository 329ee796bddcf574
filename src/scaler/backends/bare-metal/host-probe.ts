import { spawnSync } from 'node:child_process';
import { accessSync, constants, readFileSync, realpathSync, statSync } from 'node:fs';
import { delimiter, dirname, join } from 'node:path';
import type { HostFacts } from './confinement.js';

/** Capability numbers (linux/capability.h) of the ones confinement cares about. */
const CAP_BITS: Record<string, number> = {
  CAP_CHOWN: 0,
  CAP_DAC_OVERRIDE: 1,
  CAP_FOWNER: 3,
  CAP_KILL: 5,
  CAP_SETGID: 6,
  CAP_SETUID: 7,
};

/** The named capabilities set in a `CapEff:` hex mask from /proc/<pid>/status. */
export function capsFromStatus(status: string): Set<string> {
  const m = /^CapEff:\s*([0-9a-f]+)/im.exec(status);
  const out = new Set<string>();
  if (!m) return out;
  const mask = BigInt(`0x${m[1]}`);
  for (const [name, bit] of Object.entries(CAP_BITS)) if ((mask >> BigInt(bit)) & 1n) out.add(name);
  return out;
}

export function onPath(cmd: string, path: string | undefined): string | undefined {
  for (const dir of (path ?? '').split(delimiter)) {
    if (!dir) continue;
    try {
      accessSync(join(dir, cmd), constants.X_OK);
      return join(dir, cmd);
    } catch {
      // not in this PATH entry
    }
  }
  return undefined;
}

/**
 * What this host lets the orchestrator do, asked of the host itself: the uid, the effective
 * capabilities, the tools on the PATH agents get, and whether bwrap really starts a sandbox (a
 * kernel or a security module may forbid user namespaces even with bwrap installed).
 */
export function probeHostFacts(hostEnv: NodeJS.ProcessEnv = process.env): HostFacts {
  const root = process.getuid?.() === 0;
  let status = '';
  try {
    status = readFileSync('/proc/self/status', 'utf8');
  } catch {
    // not Linux: no capabilities to read, and neither mechanism exists
  }
  const bwrap = onPath('bwrap', hostEnv.PATH);
  let userNamespaces = false;
  if (bwrap) {
    const run = spawnSync(
      bwrap,
      ['--ro-bind', '/', '/', '--dev', '/dev', '--proc', '/proc', '--unshare-pid', '--', 'true'],
      { stdio: 'ignore', timeout: 10_000 },
    );
    userNamespaces = run.status === 0;
  }
  return {
    root,
    caps: capsFromStatus(status),
    bwrap: bwrap !== undefined,
    setpriv: onPath('setpriv', hostEnv.PATH) !== undefined,
    userNamespaces,
  };
}

/**
 * Why a process of another, unprivileged uid could not run `file` (a dir on the way it may not
 * enter, or the file it may not read and execute), or undefined when it can. Per-agent users run
 * the agent binary and node under their own uids, so an install in a private home cannot serve them.
 */
export function othersCannotRun(file: string): string | undefined {
  let real: string;
  try {
    real = realpathSync(file);
  } catch {
    return undefined; // a missing file is reported by the required-tools check, with its own fix
  }
  for (let dir = dirname(real); ; dir = dirname(dir)) {
    const mode = statSync(dir).mode;
    if (!(mode & 0o001)) return `${dir} is mode ${(mode & 0o777).toString(8).padStart(4, '0')}`;
    if (dir === dirname(dir)) break;
  }
  const mode = statSync(real).mode;
  if ((mode & 0o005) !== 0o005)
    return `${real} is mode ${(mode & 0o777).toString(8).padStart(4, '0')} (others need read and execute)`;
  return undefined;
}
