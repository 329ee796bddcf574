import { randomBytes } from 'node:crypto';
import { mkdir, unlink, writeFile } from 'node:fs/promises';
import { homedir, tmpdir } from 'node:os';
import { join } from 'node:path';
import { errorMessage } from '../../util/errors.js';

/**
 * Where the machine-pool ledger lives. Every orchestrator on a host must land on the same directory
 * for pools to be shared, so the fallback order is fixed and predictable.
 */

export interface LedgerDirOptions {
  /** Operator-configured directory. When set it must work: see `resolveLedgerDir`. */
  explicitDir?: string;
  env?: NodeJS.ProcessEnv;
  /** Overrides `os.homedir()` (tests). */
  homeDir?: string;
  /** Overrides the system-wide default (tests); normally `/var/lib/kici/scaler-ledger`. */
  systemDir?: string;
}

export const SYSTEM_LEDGER_DIR = '/var/lib/kici/scaler-ledger';

/** The default candidates, best first (without the explicit directory). */
export function defaultLedgerDirs(opts: LedgerDirOptions = {}): string[] {
  const env = opts.env ?? process.env;
  const dirs = [opts.systemDir ?? SYSTEM_LEDGER_DIR];
  const home = opts.homeDir ?? safeHomedir();
  const stateHome = env.XDG_STATE_HOME || (home ? join(home, '.local', 'state') : '');
  if (stateHome) dirs.push(join(stateHome, 'kici', 'scaler-ledger'));
  dirs.push(join(env.TMPDIR || tmpdir(), 'kici-scaler-ledger'));
  return dirs;
}

function safeHomedir(): string {
  try {
    return homedir();
  } catch {
    return '';
  }
}

/** Create `dir` and prove it is writable by writing and removing a probe file. */
export async function probeLedgerDir(dir: string): Promise<void> {
  await mkdir(dir, { recursive: true });
  const probe = join(dir, `.probe-${process.pid}-${randomBytes(4).toString('hex')}`);
  await writeFile(probe, '', { flag: 'wx' });
  await unlink(probe);
}

export class LedgerDirError extends Error {
  override readonly name = 'LedgerDirError';
}

/**
 * Pick the ledger directory. An explicit directory is used or the call fails: silently falling
 * back would let this process coordinate on a different ledger than its peers and overshoot the
 * pool. Otherwise the first default candidate that can be created and written wins.
 */
export async function resolveLedgerDir(opts: LedgerDirOptions = {}): Promise<string> {
  if (opts.explicitDir) {
    try {
      await probeLedgerDir(opts.explicitDir);
      return opts.explicitDir;
    } catch (err) {
      throw new LedgerDirError(
        `machine-pool ledger directory ${opts.explicitDir} is not usable: ${errorMessage(err)}`,
        { cause: err },
      );
    }
  }
  const failures: string[] = [];
  for (const dir of defaultLedgerDirs(opts)) {
    try {
      await probeLedgerDir(dir);
      return dir;
    } catch (err) {
      failures.push(`${dir}: ${errorMessage(err)}`);
    }
  }
  throw new LedgerDirError(
    `no usable machine-pool ledger directory (tried ${failures.join('; ')}); set an explicit ledger directory`,
  );
}
