import { unlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { sql, type Kysely } from 'kysely';
import type { Database } from '../store/index.js';
import { errorMessage } from '../util/errors.js';
import type { Logger } from '../util/logger.js';

export type StoreHealth = { ok: true } | { ok: false; problem: string };

/**
 * Can the store still write? A server whose database cannot write accepts runs it cannot keep,
 * so /readyz must say so. A tiny write is tried every few seconds, and again on demand (at most
 * once a second) when /readyz asks.
 *
 * The embedded database keeps its files open, so a data dir made read-only under it fails only
 * when PGlite next creates a file; the probe therefore also creates (and removes) a file there.
 */
export class StoreProbe {
  private health: StoreHealth = { ok: true };
  private lastRunMs = 0;
  private running: Promise<StoreHealth> | undefined;
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly db: Kysely<Database>,
    /** Directories that must stay writable (the data dir, and the embedded database's own). */
    private readonly dirs: string[],
    private readonly log: Logger,
    private readonly intervalMs = 5000,
    private readonly timeoutMs = 5000,
  ) {}

  private onRecovered: (() => void) | undefined;

  /** Call `fn` each time the store takes writes again after failing (the orchestrator re-reads its queue). */
  whenRecovered(fn: () => void): void {
    this.onRecovered = fn;
  }

  start(): void {
    this.timer = setInterval(() => void this.check(), this.intervalMs);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
    this.timer = undefined;
  }

  /** The last result, refreshed first when it is older than a second. */
  async current(): Promise<StoreHealth> {
    if (Date.now() - this.lastRunMs >= 1000) return this.check();
    return this.running ?? this.health;
  }

  check(): Promise<StoreHealth> {
    this.running ??= this.probe().finally(() => (this.running = undefined));
    return this.running;
  }

  private async probe(): Promise<StoreHealth> {
    this.lastRunMs = Date.now();
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`no answer within ${this.timeoutMs} ms`)), this.timeoutMs);
    });
    let next: StoreHealth;
    try {
      await Promise.race([this.write(), timeout]);
      next = { ok: true };
    } catch (err) {
      next = { ok: false, problem: errorMessage(err) };
    } finally {
      clearTimeout(timer);
    }
    if (!next.ok && (this.health.ok || this.health.problem !== next.problem))
      this.log.error({ problem: next.problem }, 'the store cannot write; /readyz answers 503');
    else if (next.ok && !this.health.ok) {
      this.log.info('the store can write again');
      this.onRecovered?.();
    }
    this.health = next;
    return next;
  }

  private async write(): Promise<void> {
    for (const dir of this.dirs) {
      const file = join(dir, '.kici-write-probe');
      try {
        await writeFile(file, String(Date.now()), { mode: 0o600 });
        await unlink(file);
      } catch (err) {
        throw new Error(`${dir} is not writable: ${errorMessage(err)}`, { cause: err });
      }
    }
    try {
      await sql`insert into kici_probe (id, checked_at) values (1, now())
        on conflict (id) do update set checked_at = excluded.checked_at`.execute(this.db);
    } catch (err) {
      throw new Error(`database write failed: ${errorMessage(err)}`, { cause: err });
    }
  }
}
