/**
 * The one place that runs `nft`. It speaks nft's JSON interface both ways, so rules are built as
 * data (src/net/nft-rules.ts) and never as shell text; the binary is started by argv, never a shell.
 */
import { spawn } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { hostToolEnv } from '../util/host-tool-env.js';
import { resolveTool } from '../util/system-tools.js';

/** Batches up to this size go on the command line (Linux allows 128 KiB per argument). */
const ARGV_LIMIT = 64 * 1024;

/** One JSON command (`{"add": {...}}`, `{"delete": {...}}`, ...). */
export type NftCommand = Record<string, unknown>;
/** One object of `nft -j list` output (`{"table": {...}}`, `{"chain": {...}}`, ...). */
export type NftObject = Record<string, Record<string, unknown>>;

export interface NftRunner {
  /** Apply a batch atomically (`nft -j <batch>`): either every command takes effect or none does. */
  run(commands: NftCommand[]): Promise<void>;
  /** `nft -j list <args>`, e.g. `['tables']` or `['table', 'inet', 'kici_agents']`; the metainfo entry is dropped. */
  list(args: string[]): Promise<NftObject[]>;
}

export interface NftRunnerOptions {
  /** The nft binary; default `nft` from PATH. */
  command?: string;
  /** Prefix with `sudo -n` (config `requireSudo`): never prompts, fails instead. */
  sudo?: boolean;
  /** Run inside this named network namespace (`ip netns exec`); tests use their own. */
  netns?: string;
  /** A hung nft (a lock held elsewhere) must not stall a spawn forever. */
  timeoutMs?: number;
  /**
   * The environment nft (and sudo) runs with. When absent, the host-tool part of this process's
   * (host-tool-env.ts): a caller that forgets to pass one must not hand nft the credentials.
   */
  env?: Readonly<Record<string, string>>;
}

/** nft exited non-zero or could not start; `stderr` holds nft's own words. */
export class NftError extends Error {
  override readonly name = 'NftError';
  constructor(
    message: string,
    readonly stderr: string,
    /** `ENOENT` when the binary (or sudo / ip) is missing. */
    readonly code?: string,
  ) {
    super(message);
  }
}

/** nft's message for a table, chain or element that does not exist. */
export function isNftMissing(err: unknown): boolean {
  return err instanceof NftError && /No such file or directory/i.test(err.stderr);
}

export function createNftRunner(opts: NftRunnerOptions = {}): NftRunner {
  const prefix: string[] = [];
  if (opts.sudo) prefix.push('sudo', '-n');
  if (opts.netns) prefix.push('ip', 'netns', 'exec', opts.netns);
  // Found in /usr/sbin or /sbin too, where it lives, even when the service's PATH leaves them out.
  const command = resolveTool(opts.command ?? 'nft');
  const argv = (args: string[]): string[] => [...prefix, command, ...args];
  const timeoutMs = opts.timeoutMs ?? 10_000;
  return {
    async run(commands) {
      if (!commands.length) return;
      const json = JSON.stringify({ nftables: commands });
      // nft cannot read `-f -` from Node's stdin (a socket, not a pipe: "Could not open /dev/stdin"),
      // so the batch goes as an argument; one too big for argv goes through a private temp file.
      if (json.length <= ARGV_LIMIT) return void (await exec(argv(['-j', json]), timeoutMs, opts.env));
      const dir = await mkdtemp(join(tmpdir(), 'kici-nft-'));
      try {
        const file = join(dir, 'batch.json');
        await writeFile(file, json, { mode: 0o600 });
        await exec(argv(['-j', '-f', file]), timeoutMs, opts.env);
      } finally {
        await rm(dir, { recursive: true, force: true });
      }
    },
    async list(args) {
      const out = await exec(argv(['-j', 'list', ...args]), timeoutMs, opts.env);
      if (!out.trim()) return [];
      const parsed = JSON.parse(out) as { nftables?: NftObject[] };
      return (parsed.nftables ?? []).filter((o) => !('metainfo' in o));
    },
  };
}

function exec(argv: string[], timeoutMs: number, env?: Readonly<Record<string, string>>): Promise<string> {
  return new Promise((resolve, reject) => {
    const [cmd, ...args] = argv as [string, ...string[]];
    const child = spawn(cmd, args, {
      stdio: ['ignore', 'pipe', 'pipe'],
      timeout: timeoutMs,
      // isNftMissing matches nft's "No such file or directory", which glibc translates for a host
      // with another language: in the C locale a missing table is always recognised as one.
      env: { ...(env ?? hostToolEnv(process.env)), LC_ALL: 'C' },
    });
    let out = '';
    let err = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => (err += d));
    child.on('error', (e: NodeJS.ErrnoException) =>
      reject(new NftError(`${cmd} could not be started: ${e.message}`, err, e.code)),
    );
    child.on('close', (code, signal) => {
      if (code === 0) return resolve(out);
      const why = signal ? `was stopped by ${signal} (timeout ${timeoutMs} ms?)` : `exited with ${code}`;
      reject(new NftError(`${argv.join(' ')} ${why}: ${err.trim().split('\n')[0] ?? ''}`, err));
    });
  });
}
