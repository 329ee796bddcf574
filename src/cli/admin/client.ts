import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import {
  defaultAdminTokenFile,
  LEGACY_TOKEN_FILE,
  SERVICE_TOKEN_FILE,
} from '../../access/bootstrap-token.js';
import { resolveDataDir } from '../../util/default-data-dir.js';
import { UsageError, UserError } from '../../util/errors.js';

export interface ClientOptions {
  server?: string;
  token?: string;
  tokenFile?: string;
  dataDir?: string;
}

export class ApiError extends UserError {
  constructor(
    readonly status: number,
    problems: string[],
  ) {
    super(problems.join('; ') || `HTTP ${status}`, problems);
  }
}

/**
 * The token from a file: `--token-file`, else the orchestrator's default bootstrap token file
 * (KICI_ADMIN_TOKEN_FILE, /etc/kici/admin-token for root, the user's config dir), else the example
 * systemd unit's file, else the data dir of an orchestrator from before access tokens.
 */
async function tokenFromFiles(opts: ClientOptions): Promise<string> {
  const dir = resolveDataDir(opts.dataDir);
  const first = opts.tokenFile ?? defaultAdminTokenFile();
  const tried = [...new Set([first, SERVICE_TOKEN_FILE, join(dir, LEGACY_TOKEN_FILE)])];
  for (const path of tried) {
    const text = await readFile(path, 'utf8').catch(() => '');
    if (text.trim()) return text.trim();
  }
  throw new UserError(
    `no admin token: set KICI_ADMIN_TOKEN or --token, or run on the orchestrator's host as its user (looked in ${tried.join(' and ')})`,
  );
}

/**
 * The orchestrator's base URL: `--server`, else `KICI_URL` (the one URL agents use too; a
 * `ws://…/ws` form is accepted and turned into its HTTP origin), else `KICI_SERVER_URL`.
 */
export function adminBaseUrl(server: string | undefined, env: NodeJS.ProcessEnv = process.env): string {
  const [source, raw] =
    server !== undefined
      ? ['--server', server]
      : env.KICI_URL
        ? ['KICI_URL', env.KICI_URL]
        : env.KICI_SERVER_URL
          ? ['KICI_SERVER_URL', env.KICI_SERVER_URL]
          : ['default', 'http://127.0.0.1:8080'];
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new UsageError(
      `${source}: ${JSON.stringify(raw.slice(0, 80))} is not a URL (e.g. http://127.0.0.1:8080)`,
    );
  }
  const scheme = { 'http:': 'http:', 'https:': 'https:', 'ws:': 'http:', 'wss:': 'https:' }[url.protocol];
  if (!scheme)
    throw new UsageError(
      `${source}: ${JSON.stringify(raw.slice(0, 80))} is not an http(s) URL (e.g. http://127.0.0.1:8080)`,
    );
  // A ws URL names the agent endpoint; the API lives at the same origin.
  if (url.protocol.startsWith('ws')) return `${scheme}//${url.host}`;
  return `${scheme}//${url.host}${url.pathname}`.replace(/\/$/, '');
}

/** Talks to the admin API. On the orchestrator's own host it finds the bootstrap admin token by itself. */
export class AdminClient {
  private constructor(
    readonly baseUrl: string,
    private readonly token: string,
  ) {}

  static async create(opts: ClientOptions = {}): Promise<AdminClient> {
    const baseUrl = adminBaseUrl(opts.server);
    // An empty value counts as unset.
    const token = opts.token || process.env.KICI_ADMIN_TOKEN || (await tokenFromFiles(opts));
    return new AdminClient(baseUrl, token);
  }

  /** GET raw bytes (a backup file); API errors are thrown as request() throws them. */
  async download(path: string): Promise<Buffer> {
    let res: Response;
    try {
      res = await fetch(`${this.baseUrl}${path}`, { headers: { authorization: `Bearer ${this.token}` } });
    } catch (err) {
      throw new UserError(`cannot reach the orchestrator at ${this.baseUrl}: ${(err as Error).message}`);
    }
    if (!res.ok) {
      const text = await res.text();
      let problems: string[];
      try {
        problems = (JSON.parse(text) as { problems?: string[] }).problems ?? [`HTTP ${res.status}`];
      } catch {
        problems = [text.slice(0, 200) || `HTTP ${res.status}`];
      }
      throw new ApiError(res.status, problems);
    }
    return Buffer.from(await res.arrayBuffer());
  }

  async request<T>(method: string, path: string, body?: unknown): Promise<T> {
    let res: Response;
    try {
      res = await fetch(`${this.baseUrl}${path}`, {
        method,
        headers: {
          authorization: `Bearer ${this.token}`,
          ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
        },
        ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
      });
    } catch (err) {
      throw new UserError(`cannot reach the orchestrator at ${this.baseUrl}: ${(err as Error).message}`);
    }
    const text = await res.text();
    let data: unknown;
    try {
      data = text ? JSON.parse(text) : {};
    } catch {
      data = { problems: [text.slice(0, 200)] };
    }
    if (!res.ok) {
      const problems = (data as { problems?: string[] }).problems ?? [`HTTP ${res.status}`];
      throw new ApiError(res.status, problems);
    }
    return data as T;
  }
}
