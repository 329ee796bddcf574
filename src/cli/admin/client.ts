import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { UserError } from '../../util/errors.js';

export interface ClientOptions {
  server?: string;
  token?: string;
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

/** Talks to the admin API. On the orchestrator's own host it finds the admin token in the data dir. */
export class AdminClient {
  private constructor(
    readonly baseUrl: string,
    private readonly token: string,
  ) {}

  static async create(opts: ClientOptions = {}): Promise<AdminClient> {
    const baseUrl = (opts.server ?? process.env.KICI_SERVER_URL ?? 'http://127.0.0.1:8080').replace(
      /\/$/,
      '',
    );
    let token = opts.token ?? process.env.KICI_ADMIN_TOKEN;
    if (!token) {
      const dir = opts.dataDir ?? process.env.KICI_DATA_DIR ?? './.kici-data';
      try {
        token = (await readFile(join(dir, 'admin-token'), 'utf8')).trim();
      } catch {
        throw new UserError(
          `no admin token: set KICI_ADMIN_TOKEN, or run on the orchestrator's host (looked for ${join(dir, 'admin-token')})`,
        );
      }
    }
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
