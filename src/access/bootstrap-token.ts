import { randomBytes } from 'node:crypto';
import { link, mkdir, readFile, rm, unlink, writeFile } from 'node:fs/promises';
import { homedir } from 'node:os';
import { dirname, join, relative, resolve, isAbsolute } from 'node:path';
import type { AccessTokensRepo } from '../store/access-tokens-repo.js';
import { UserError } from '../util/errors.js';
import type { Logger } from '../util/logger.js';

/**
 * Where the bootstrap admin token lives unless `--admin-token-file` / KICI_ADMIN_TOKEN_FILE says:
 * /etc/kici for root, else the user's config dir. Never the data dir, which jobs may be able to read.
 * kici-admin looks in the same place, so on the orchestrator's host it needs no flag.
 */
export function defaultAdminTokenFile(
  env: NodeJS.ProcessEnv = process.env,
  uid: number | undefined = process.getuid?.(),
): string {
  if (env.KICI_ADMIN_TOKEN_FILE) return env.KICI_ADMIN_TOKEN_FILE;
  if (uid === 0) return '/etc/kici/admin-token';
  const base = env.XDG_CONFIG_HOME || join(env.HOME || homedir(), '.config');
  return join(base, 'kici', 'admin-token');
}

/** Where the example systemd unit keeps the token (the service user owns the directory). */
export const SERVICE_TOKEN_FILE = '/etc/kici/orchestrator/admin-token';

/** The file a pre-access-token orchestrator kept its one admin token in. */
export const LEGACY_TOKEN_FILE = 'admin-token';

export type BootstrapOutcome = 'created' | 'existing' | 'imported' | 'dead';

function inside(dir: string, path: string): boolean {
  const rel = relative(resolve(dir), resolve(path));
  return rel === '' || (!rel.startsWith('..') && !isAbsolute(rel));
}

/** PostgreSQL's (and PGlite's) SQLSTATE for a duplicate key. */
function isUniqueViolation(err: unknown): boolean {
  return (err as { code?: unknown } | null)?.code === '23505';
}

async function readSecret(file: string): Promise<string | undefined> {
  try {
    return (await readFile(file, 'utf8')).trim() || undefined;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw new UserError(`cannot read the admin token file ${file}: ${(err as Error).message}`);
  }
}

/**
 * Make sure this host has an admin token in `file` that the database accepts.
 *
 * - No file: a new bootstrap token is stored (hashed) and then published to the file in one step
 *   (link of a complete temp file), so a second instance on the same host either sees the whole
 *   file or makes its own; the loser of that race drops its row and uses the winner's token.
 * - A file whose token the database knows and accepts: used as it is; nothing new is made. So
 *   instances that share the file (one host, or a file copied to each host) share one token.
 * - A file whose token the database has never seen (a fresh database, a copied file): imported.
 * - A file whose token was revoked or expired: nothing is made (an operator revoked it on purpose);
 *   a warning says to delete the file to get a new one.
 *
 * Every token is valid on every instance of the database, so instances on different hosts, each
 * with its own file, never reject each other's tokens.
 */
export async function ensureBootstrapToken(opts: {
  file: string;
  dataDir: string;
  tokens: AccessTokensRepo;
  instanceId: string;
  now: Date;
  logger: Logger;
}): Promise<{ token: string; outcome: BootstrapOutcome }> {
  const { file, tokens, logger } = opts;
  if (inside(opts.dataDir, file))
    throw new UserError(
      `the admin token file ${file} is inside the data dir ${opts.dataDir}, which jobs may read: choose a path outside it (--admin-token-file or KICI_ADMIN_TOKEN_FILE)`,
    );
  await dropLegacyToken(opts.dataDir, logger);
  const name = async () => {
    const base = `bootstrap@${opts.instanceId}`;
    return (await tokens.nameTaken(base)) ? `${base}-${randomBytes(3).toString('hex')}` : base;
  };
  for (let attempt = 0; attempt < 3; attempt++) {
    const secret = await readSecret(file);
    if (secret) {
      const known = await tokens.findBySecret(secret);
      if (known && !known.revokedAt && !(known.expiresAt && known.expiresAt <= opts.now)) {
        logger.info({ file, tokenName: known.name }, `admin token: using the bootstrap token in ${file}`);
        return { token: secret, outcome: 'existing' };
      }
      if (known) {
        logger.warn(
          { file, tokenName: known.name },
          `admin token: the token in ${file} was revoked or has expired; delete the file and restart to get a new one`,
        );
        return { token: secret, outcome: 'dead' };
      }
      const made = await tokens
        .create({ name: await name(), role: 'admin', bootstrap: true, now: opts.now, secret })
        // A unique-key clash means another instance imported it (or took the name) first: the next
        // pass finds its row. Anything else (the database is down) is the start's own failure.
        .catch((err: unknown) => {
          if (isUniqueViolation(err)) return undefined;
          throw err;
        });
      if (!made) continue;
      logger.info({ file, tokenName: made.info.name }, `admin token: imported the token in ${file}`);
      return { token: secret, outcome: 'imported' };
    }
    const made = await tokens.create({ name: await name(), role: 'admin', bootstrap: true, now: opts.now });
    // A row whose secret never reached the file would be an admin token nobody holds: drop it.
    const published = await publish(file, made.token).catch(async (err: unknown) => {
      await tokens.discard(made.info.id);
      throw err;
    });
    if (published) {
      logger.info(
        { file, tokenName: made.info.name },
        `admin token: wrote a new bootstrap admin token to ${file} (mode 0600)`,
      );
      return { token: made.token, outcome: 'created' };
    }
    await tokens.discard(made.info.id);
  }
  throw new Error(`could not settle the admin token file ${file}`);
}

/** Write the file whole, or not at all when it already exists. */
async function publish(file: string, secret: string): Promise<boolean> {
  await mkdir(dirname(file), { recursive: true, mode: 0o700 });
  const tmp = `${file}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`;
  await writeFile(tmp, secret + '\n', { mode: 0o600, flag: 'wx' });
  try {
    await link(tmp, file);
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'EEXIST') return false;
    throw new UserError(`cannot write the admin token file ${file}: ${(err as Error).message}`);
  } finally {
    await rm(tmp, { force: true });
  }
}

/** The old single token in the data dir is no longer accepted; the file is removed so nobody relies on it. */
async function dropLegacyToken(dataDir: string, logger: Logger): Promise<void> {
  const path = join(dataDir, LEGACY_TOKEN_FILE);
  try {
    await unlink(path);
    logger.warn(
      { path },
      `removed the old admin token from the data dir (${path}); it is no longer accepted: use the bootstrap token file or an access token`,
    );
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
}
