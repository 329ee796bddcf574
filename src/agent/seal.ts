import {
  accessSync,
  chmodSync,
  constants,
  copyFileSync,
  mkdtempSync,
  readFileSync,
  rmdirSync,
  rmSync,
  statSync,
  unlinkSync,
} from 'node:fs';
import { spawnSync } from 'node:child_process';
import { tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';

/**
 * Makes the agent process non-dumpable, so the steps it runs (same uid) cannot read its memory,
 * environment or descriptors through /proc or ptrace: the token and the session proof live there.
 *
 * Linux marks a process non-dumpable when it executes a binary it may not read. So the agent
 * copies its Node binary to a private dir, makes the copy execute-only, and re-executes itself
 * through it; the re-executed agent removes the copy at once (the running image keeps it alive).
 * The steps it spawns run ordinary binaries, so they are dumpable again, which is fine: they hold
 * nothing of the agent's.
 *
 * The token is read before the re-execution (the descriptor it came on does not survive it: Node
 * marks it close-on-exec) and crosses into the sealed process in its initial environment, which
 * the kernel hides exactly as it hides the memory once the process is non-dumpable.
 */

/** Set on the re-executed agent: the path of the copy it runs from (removed on arrival). */
export const SEAL_MARKER = 'KICI_AGENT_SEALED_BY';
/** `off` skips sealing (for debugging an agent with a same-uid tool such as gdb or strace). */
export const SEAL_SWITCH = 'KICI_AGENT_SEAL';

const DIR_PREFIX = '.kici-seal-';

export type SealOutcome =
  | { kind: 'sealed' }
  | { kind: 'skipped'; why: string }
  /** The agent's memory stays readable by its steps: `why` says what failed. */
  | { kind: 'unsealed'; why: string };

export interface SealDeps {
  platform: NodeJS.Platform;
  uid: number | undefined;
  /** Holds CAP_DAC_OVERRIDE or CAP_DAC_READ_SEARCH: no file mode keeps it from reading. */
  readsAnything: boolean;
  execPath: string;
  execArgv: string[];
  argv: string[];
  env: NodeJS.ProcessEnv;
  execve: ((file: string, args: string[], env: NodeJS.ProcessEnv) => never) | undefined;
}

export function processSealDeps(): SealDeps {
  return {
    platform: process.platform,
    uid: process.getuid?.(),
    readsAnything: readsAnyFile(),
    execPath: process.execPath,
    execArgv: process.execArgv,
    argv: process.argv,
    env: process.env,
    execve: typeof process.execve === 'function' ? process.execve.bind(process) : undefined,
  };
}

/**
 * True when this process is non-dumpable. The kernel then gives its /proc entries to root (seen as
 * another uid inside a user namespace), so for any other uid the owner tells. For uid 0 it does
 * not: a child (without our file capabilities, like a step) tries to open our environment instead.
 */
export function isSealed(uid: number | undefined): boolean {
  if (uid === 0) {
    const probe = spawnSync('/bin/sh', ['-c', 'exec 3< /proc/$PPID/environ'], { stdio: 'ignore' });
    return probe.error === undefined && probe.status !== 0;
  }
  try {
    return statSync('/proc/self/environ').uid !== uid;
  } catch {
    return false;
  }
}

/** Bits 1 and 2 of the effective capability set: CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH. */
function readsAnyFile(): boolean {
  try {
    const eff = /^CapEff:\s*([0-9a-f]+)$/m.exec(readFileSync('/proc/self/status', 'utf8'))?.[1];
    return eff !== undefined && (BigInt('0x' + eff) & 0b110n) !== 0n;
  } catch {
    return process.getuid?.() === 0;
  }
}

/**
 * Seal the agent, or say why not. Returns only when no re-execution happens; on success it does
 * not return (the process image is replaced). `token` is what the agent was handed, carried over.
 */
export function sealAgent(token: string | undefined, deps: SealDeps = processSealDeps()): SealOutcome {
  const { env } = deps;
  const copy = env[SEAL_MARKER];
  if (copy !== undefined) {
    // We are the re-executed agent: the copy has done its job.
    delete env[SEAL_MARKER];
    dropCopy(copy);
    return isSealed(deps.uid)
      ? { kind: 'sealed' }
      : { kind: 'unsealed', why: 'the re-executed agent is still dumpable' };
  }
  if (env[SEAL_SWITCH] === 'off') return { kind: 'skipped', why: `${SEAL_SWITCH}=off` };
  if (deps.platform !== 'linux') return { kind: 'skipped', why: 'not Linux' };
  // A process that may read any file (root with its capabilities) can read the copy too, so its
  // exec would not seal it; and a step holding those capabilities owns the host anyway. Root with
  // its capabilities dropped (a root orchestrator's sandbox) is sealed like anyone else.
  if (deps.readsAnything) return { kind: 'skipped', why: 'may read any file (CAP_DAC_OVERRIDE)' };
  const noExecve = { kind: 'unsealed', why: 'this Node has no process.execve' } as const;
  if (!readable(deps.execPath)) {
    // Started from an execute-only runtime (an image, or the copy a scaler prepares): sealed by
    // that exec, unless whoever ran it could read it then (root that dropped its capabilities only
    // on the exec, as bubblewrap does). One more exec of the same file, now unreadable, seals it.
    if (isSealed(deps.uid)) return { kind: 'sealed' };
    return deps.execve ? reexec(deps.execPath, token, deps) : noExecve;
  }
  if (!deps.execve) return noExecve;
  if (suidDumpable() === 1)
    return { kind: 'unsealed', why: 'fs.suid_dumpable is 1, so an unreadable binary does not seal' };
  let dir: string;
  try {
    dir = privateDir(env);
  } catch (err) {
    return { kind: 'unsealed', why: (err as Error).message };
  }
  const file = join(dir, 'node');
  try {
    copyFileSync(deps.execPath, file, constants.COPYFILE_FICLONE);
    chmodSync(file, 0o111);
  } catch (err) {
    rmSync(dir, { recursive: true, force: true });
    return { kind: 'unsealed', why: (err as Error).message };
  }
  const outcome = reexec(file, token, deps);
  rmSync(dir, { recursive: true, force: true });
  return outcome;
}

/** Replaces this process with `file` running the same agent; returns only if that fails. */
function reexec(file: string, token: string | undefined, deps: SealDeps): SealOutcome {
  const next: NodeJS.ProcessEnv = { ...deps.env, [SEAL_MARKER]: file };
  delete next.KICI_AGENT_TOKEN_FD;
  delete next.KICI_AGENT_TOKEN_FILE;
  if (token) next.KICI_AGENT_TOKEN = token;
  try {
    deps.execve!(file, [file, ...deps.execArgv, ...deps.argv.slice(1)], next);
  } catch (err) {
    return { kind: 'unsealed', why: (err as Error).message };
  }
  return { kind: 'unsealed', why: 'process.execve returned' };
}

function readable(path: string): boolean {
  try {
    accessSync(path, constants.R_OK);
    return true;
  } catch {
    return false;
  }
}

function suidDumpable(): number | undefined {
  try {
    return Number(readFileSync('/proc/sys/fs/suid_dumpable', 'utf8').trim());
  } catch {
    return undefined;
  }
}

/** A fresh 0700 dir for the copy: the runtime dir (memory-backed) first, then the work area. */
function privateDir(env: NodeJS.ProcessEnv): string {
  const bases = [
    env.XDG_RUNTIME_DIR,
    env.KICI_WORK_DIR && dirname(env.KICI_WORK_DIR),
    env.KICI_WORK_DIR,
    tmpdir(),
  ];
  let last: unknown;
  for (const base of bases) {
    if (!base) continue;
    try {
      return mkdtempSync(join(base, DIR_PREFIX));
    } catch (err) {
      last = err;
    }
  }
  throw last ?? new Error('no writable place for the sealed runtime');
}

/**
 * Removes the copy and its private dir. Only a path this module makes is touched: the marker is
 * an ordinary variable that a label set's env could also set.
 */
function dropCopy(copy: string): void {
  if (basename(copy) !== 'node' || !basename(dirname(copy)).startsWith(DIR_PREFIX)) return;
  try {
    unlinkSync(copy);
    rmdirSync(dirname(copy));
  } catch {
    // gone already, or not ours: nothing of the agent's is in it
  }
}
