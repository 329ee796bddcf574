import { execFile } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { closeSync, constants, lstatSync, openSync, readSync, statSync } from 'node:fs';
import { chmod, chown, copyFile, lstat, mkdir, realpath, rename, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { errorMessage } from '../../../util/errors.js';

/**
 * One execute-only copy of Node for the agents this host starts. A process that executes a binary
 * it may not read is made non-dumpable by the kernel, so the steps it runs under its uid cannot read
 * its memory (its token and session proof) through /proc or ptrace. An agent started from this copy
 * is sealed from its first instruction, without copying Node itself (which costs a fraction of a
 * second and, for a copy that stays mapped, the binary's size in memory, per agent).
 *
 * The copy lives in /tmp under a name made of the orchestrator's uid and the source binary's
 * identity, so a restart reuses it instead of adding another; a dir there that is not ours (owner,
 * modes) is never used. Failing to make it is not an error: agents then seal themselves.
 */
export class SealedRuntime {
  /** Shared by every scaler in this process: they would otherwise race to make the same copy. */
  private static readonly made = new Map<string, Promise<string | undefined>>();

  constructor(
    private readonly warn: (msg: string) => void,
    private readonly base: string = tmpdir(),
  ) {}

  /** The execute-only copy of `node` (a path to the Node binary), or undefined when none works. */
  async for(node: string): Promise<string | undefined> {
    const key = `${this.base}\0${node}`;
    const known = SealedRuntime.made.get(key);
    const file = known && (await known);
    // Checked on each use: a /tmp cleaner may remove a copy an orchestrator of months still names.
    // Checked synchronously: this runs on every cold start, and a trip through the thread pool
    // costs more than the two system calls.
    if (known && (file === undefined || ours(file, process.getuid?.() ?? 0, statSync(node).size)))
      return file;
    const p = this.prepare(node).catch((err: unknown) => {
      this.warn(`agents will copy Node to seal themselves: ${errorMessage(err)}`);
      return undefined;
    });
    SealedRuntime.made.set(key, p);
    return p;
  }

  private async prepare(node: string): Promise<string | undefined> {
    if (process.platform !== 'linux') return undefined;
    const uid = process.getuid?.() ?? 0;
    const real = await realpath(node);
    const src = await stat(real);
    const id = createHash('sha256').update(`${real}\0${src.size}\0${src.mtimeMs}\0${src.ino}`).digest('hex');
    const dir = join(this.base, `kici-sealed-node-${uid}-${id.slice(0, 16)}`);
    const file = join(dir, 'node');
    try {
      await mkdir(dir, { mode: 0o711 });
      await chmod(dir, 0o711);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
    const d = await lstat(dir);
    if (!d.isDirectory() || d.uid !== uid || (d.mode & 0o7777) !== 0o711)
      throw new Error(`${dir} exists but is not this user's 0711 dir`);
    if (!ours(file, uid, src.size)) {
      // Unique, so two orchestrators making it at once never write the same file.
      const part = join(dir, `node.${process.pid}.${randomBytes(6).toString('hex')}.part`);
      await copyFile(real, part, constants.COPYFILE_FICLONE);
      // Run as root, the copy keeps the source's owner (Node 24 copies it across). A copy owned by
      // another uid is never taken as ours, so it would be made again on every cold start, and
      // its owner could write to what every agent executes.
      if ((await lstat(part)).uid !== uid) await chown(part, uid, process.getgid?.() ?? uid);
      await chmod(part, 0o111);
      await rename(part, file);
    }
    // A noexec /tmp, say: agents started from it would never run. Checked once, here.
    const [want, got] = await Promise.all([versionOf(real), versionOf(file)]);
    if (want !== got) {
      await rm(dir, { recursive: true, force: true });
      throw new Error(`the copy in ${dir} does not run like ${real}`);
    }
    return file;
  }
}

function ours(file: string, uid: number, size: number): boolean {
  try {
    const s = lstatSync(file);
    return s.isFile() && s.uid === uid && s.size === size && (s.mode & 0o7777) === 0o111;
  } catch {
    return false;
  }
}

async function versionOf(node: string): Promise<string> {
  const { stdout } = await promisify(execFile)(node, ['--version'], { timeout: 20_000 });
  return stdout.trim();
}

/**
 * True when `binary` is a script run by `node` (`#!/usr/bin/env node` or `#!/…/node`, no options):
 * only such an agent can be started through the sealed copy instead of its own interpreter.
 */
export async function runsOnNode(binary: string): Promise<boolean> {
  // Synchronous: one small read on every cold start costs less than its trips through the thread
  // pool. Non-blocking, so a FIFO planted at the path cannot stall the orchestrator.
  let fd: number | undefined;
  try {
    fd = openSync(binary, constants.O_RDONLY | constants.O_NONBLOCK);
    const buf = Buffer.alloc(128);
    const bytesRead = readSync(fd, buf, 0, 128, 0);
    const first = buf.subarray(0, bytesRead).toString('utf8').split('\n')[0]!;
    return /^#!\s*(\/usr\/bin\/env\s+node|\/\S*\/node)\s*$/.test(first);
  } catch {
    return false;
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}
