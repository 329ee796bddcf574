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
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { errorMessage } from '../util/errors.js';

/**
 * Makes the agent process non-dumpable, so the steps it runs cannot read its memory, environment or
 * descriptors through /proc or ptrace: the token and the session proof live there. The kernel does
 * this in two situations the agent can bring about, tried in this order:
 *
 * - A process that changes its effective gid is marked non-dumpable. An agent allowed to change it
 *   (root, as in a container or a VM guest, where steps run as root too) switches to another gid
 *   and back, which costs two system calls. Its steps, also root, then need CAP_SYS_PTRACE to read
 *   its memory, which the container and VM backends do not give them.
 * - A process that executes a binary it may not read is marked non-dumpable. Any other agent copies
 *   its Node binary to a private dir, makes the copy execute-only, and re-executes itself through it;
 *   the re-executed agent removes the copy at once (the running image keeps it alive). Its steps,
 *   under the agent's uid, then cannot open its /proc entries at all.
 *
 * The steps it spawns run ordinary binaries, so they are dumpable again, which is fine: they hold
 * nothing of the agent's.
 *
 * The token is read before a re-execution (the descriptor it came on does not survive it: Node marks
 * it close-on-exec). It crosses into the new image in a 0600 file in the private dir, which the new
 * image removes as soon as it has read it, never in the new image's environment: if the kernel did
 * not seal the new image after all, that environment would stay readable for the agent's whole life.
 */

/** Set on the re-executed agent: the private dir of the re-execution (removed on arrival). */
export const SEAL_MARKER = 'KICI_AGENT_SEALED_BY';
/** `off` skips sealing (for debugging an agent with a same-uid tool such as gdb or strace). */
export const SEAL_SWITCH = 'KICI_AGENT_SEAL';

const DIR_PREFIX = '.kici-seal-';
const COPY_NAME = 'node';
const TOKEN_NAME = 'token';
/**
 * The gids an agent briefly takes as its effective gid to be marked non-dumpable: never 0, since a
 * sealed process's /proc entries belong to gid 0, and that is how the result is read back. Two, in
 * case one is not mapped in a user namespace (a rootless engine's).
 */
const SWITCH_GIDS = [65534, 1];

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
  /** Changing the effective gid (absent where Node has no such call). */
  getegid?: (() => number) | undefined;
  setegid?: ((gid: number) => void) | undefined;
  /** The group that owns this process's /proc entries: gid 0 once it is non-dumpable. */
  procGid?: (() => number) | undefined;
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
    getegid: process.getegid?.bind(process),
    setegid: process.setegid?.bind(process),
    procGid: () => statSync('/proc/self/environ').gid,
  };
}

/**
 * True when this process (not root) is non-dumpable: the kernel then gives its /proc entries to
 * root (seen as another uid inside a user namespace), so the owner tells. No subprocess is needed.
 */
export function isSealed(uid: number | undefined): boolean {
  try {
    return uid !== 0 && statSync('/proc/self/environ').uid !== uid;
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
 * Seal the agent, or say why not. Returns only when no re-execution happens; on success of one it
 * does not return (the process image is replaced). `token` is what the agent was handed, carried over.
 */
export function sealAgent(token: string | undefined, deps: SealDeps = processSealDeps()): SealOutcome {
  const { env } = deps;
  const dir = env[SEAL_MARKER];
  if (dir !== undefined) {
    // We are the re-executed agent: the token file was read already, the copy has done its job.
    delete env[SEAL_MARKER];
    // Root without capabilities cannot tell by the owner. It re-executed through a file it could not
    // read (checked before it did), which seals unless the host says otherwise.
    const sealed = deps.uid === 0 ? !readable(deps.execPath) && suidDumpable() !== 1 : isSealed(deps.uid);
    dropPrivateDir(dir);
    return sealed ? { kind: 'sealed' } : { kind: 'unsealed', why: 'the re-executed agent is still dumpable' };
  }
  if (env[SEAL_SWITCH] === 'off') return { kind: 'skipped', why: `${SEAL_SWITCH}=off` };
  if (deps.platform !== 'linux') return { kind: 'skipped', why: 'not Linux' };
  const switched = sealByGidSwitch(deps);
  if (switched) return switched;
  // A process that may read any file (root with its capabilities) can read the copy too, so its
  // exec would not seal it; such an agent seals by the gid switch above, unless it may not change
  // gids either. Root with its capabilities dropped (a root orchestrator's sandbox) re-executes.
  if (deps.readsAnything) return { kind: 'skipped', why: 'may read any file (CAP_DAC_OVERRIDE)' };
  // Started from an execute-only runtime (an image, or the copy a scaler prepares): sealed by that
  // exec, unless whoever ran it could read it then (root that dropped its capabilities only on the
  // exec, as bubblewrap does: root cannot tell by the owner, so it always re-executes). One more
  // exec of the same file, now unreadable, seals it.
  const fromRuntime = !readable(deps.execPath);
  if (fromRuntime && isSealed(deps.uid)) return { kind: 'sealed' };
  if (!deps.execve) return { kind: 'unsealed', why: 'this Node has no process.execve' };
  if (suidDumpable() === 1)
    return { kind: 'unsealed', why: 'fs.suid_dumpable is 1, so an unreadable binary does not seal' };
  let priv: string;
  try {
    priv = privateDir(env);
  } catch (err) {
    return { kind: 'unsealed', why: errorMessage(err) };
  }
  let file = deps.execPath;
  if (!fromRuntime) {
    file = join(priv, COPY_NAME);
    try {
      copyFileSync(deps.execPath, file, constants.COPYFILE_FICLONE);
      chmodSync(file, 0o111);
    } catch (err) {
      rmSync(priv, { recursive: true, force: true });
      return { kind: 'unsealed', why: errorMessage(err) };
    }
  }
  const outcome = reexec(file, priv, token, deps);
  rmSync(priv, { recursive: true, force: true });
  return outcome;
}

/**
 * Switches the effective gid away and back, which marks the process non-dumpable (unless
 * fs.suid_dumpable is 1), and reads the effect back from the owner of its /proc entries while the
 * gid is switched. Undefined when this process may not switch (no CAP_SETGID): the caller goes on.
 */
function sealByGidSwitch(deps: SealDeps): SealOutcome | undefined {
  const { getegid, setegid, procGid } = deps;
  if (!getegid || !setegid || !procGid) return undefined;
  const own = getegid();
  for (const gid of SWITCH_GIDS) {
    if (gid === own) continue;
    try {
      setegid(gid);
    } catch {
      continue; // EPERM: no CAP_SETGID; EINVAL: not mapped in this user namespace
    }
    let owner: number | undefined;
    try {
      owner = procGid();
    } catch {
      owner = undefined;
    } finally {
      setegid(own);
    }
    if (owner === undefined) return { kind: 'unsealed', why: 'cannot read /proc/self to check the seal' };
    return owner === gid
      ? { kind: 'unsealed', why: 'fs.suid_dumpable is 1, so a change of ids does not seal' }
      : { kind: 'sealed' };
  }
  return undefined;
}

/** Replaces this process with `file` running the same agent; returns only if that fails. */
function reexec(file: string, dir: string, token: string | undefined, deps: SealDeps): SealOutcome {
  const next: NodeJS.ProcessEnv = { ...deps.env, [SEAL_MARKER]: dir };
  delete next.KICI_AGENT_TOKEN;
  delete next.KICI_AGENT_TOKEN_FD;
  delete next.KICI_AGENT_TOKEN_FILE;
  try {
    if (token) {
      const tokenFile = join(dir, TOKEN_NAME);
      writeFileSync(tokenFile, token, { mode: 0o600, flag: 'wx' });
      next.KICI_AGENT_TOKEN_FILE = tokenFile;
    }
    deps.execve!(file, [file, ...deps.execArgv, ...deps.argv.slice(1)], next);
  } catch (err) {
    return { kind: 'unsealed', why: errorMessage(err) };
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
 * Removes the private dir of a re-execution: the copy of Node and the token file, if still there.
 * Only a dir this module makes is touched: the marker is an ordinary variable that a label set's
 * env could also set, so only the two names this module writes are removed from it.
 */
function dropPrivateDir(dir: string): void {
  if (!basename(dir).startsWith(DIR_PREFIX)) return;
  for (const name of [COPY_NAME, TOKEN_NAME]) {
    try {
      unlinkSync(join(dir, name));
    } catch {
      // gone already (the token file is removed by whoever reads it)
    }
  }
  try {
    rmdirSync(dir);
  } catch {
    // not empty, so not ours: nothing of the agent's is in it
  }
}
