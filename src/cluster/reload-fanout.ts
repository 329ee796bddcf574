import { sql, type Kysely } from 'kysely';
import type { Database } from '../store/index.js';
import { errorMessage } from '../util/errors.js';
import type { Logger } from '../util/logger.js';

export const RELOAD_CHANNEL = 'kici_reload';

export interface ReloadOutcome {
  result: string;
  problems?: string[] | undefined;
  plan?: unknown;
}

export interface InstanceReload {
  instance: string;
  /** 'applied', 'rejected', 'not-configured', or 'no-answer' when it did not answer in time. */
  result: string;
  problems: string[];
}

/**
 * `kici-admin scaler reload` for every instance: the instance asked writes a request row and
 * NOTIFYs; each instance (woken by the notification, or by its poll) reloads its own config file
 * and writes its result; the asking instance waits for the live ones and reports each.
 */
export class ReloadFanout {
  private lastSeen = 0;
  private chain: Promise<void> = Promise.resolve();
  /** This instance's full outcome (with its plan) for a request it is answering the caller of. */
  private readonly outcomes = new Map<number, ReloadOutcome>();
  private readonly mine = new Set<number>();

  constructor(
    private readonly db: Kysely<Database>,
    private readonly instanceId: string,
    private readonly reloadLocal: () => Promise<ReloadOutcome>,
    private readonly alivePeers: () => Promise<string[]>,
    private readonly log: Logger,
    private readonly waitMs = 10_000,
  ) {}

  /** Requests made before this start are history, not orders. */
  async init(): Promise<void> {
    const r = await sql<{ id: string | null }>`select max(id) as id from kici_reload_requests`.execute(
      this.db,
    );
    this.lastSeen = Number(r.rows[0]?.id ?? 0);
  }

  /** `waitMs`: how long to wait for the live peers' answers (this fan-out's default when absent). */
  async request(waitMs = this.waitMs): Promise<{ local: ReloadOutcome; instances: InstanceReload[] }> {
    const r = await sql<{ id: string }>`
      with req as (insert into kici_reload_requests (requested_by) values (${this.instanceId}) returning id)
      select id, pg_notify(${RELOAD_CHANNEL}, id::text) from req`.execute(this.db);
    const id = Number(r.rows[0]!.id);
    this.mine.add(id);
    const peers = await this.alivePeers();
    // Ours is applied through the same serial path as a peer's, so two requests never interleave.
    await this.catchUp();
    const local = this.outcomes.get(id);
    this.outcomes.delete(id);
    this.mine.delete(id);
    const until = Date.now() + waitMs;
    let answers = new Map<string, InstanceReload>();
    for (;;) {
      answers = await this.results(id);
      if (peers.every((p) => answers.has(p)) || Date.now() > until) break;
      await new Promise((res) => setTimeout(res, 100));
    }
    const instances = [this.instanceId, ...peers].map(
      (instance) => answers.get(instance) ?? { instance, result: 'no-answer', problems: [] },
    );
    return { local: local ?? { result: 'no-answer' }, instances };
  }

  /** Apply every request newer than the last one seen (notification or poll). */
  catchUp(): Promise<void> {
    const run = async () => {
      const rows = await sql<{ id: string }>`
        select id from kici_reload_requests where id > ${this.lastSeen} order by id`.execute(this.db);
      for (const row of rows.rows) await this.apply(Number(row.id));
    };
    this.chain = this.chain.then(run).catch((err: unknown) => {
      this.log.warn({ err: errorMessage(err) }, 'could not apply a cluster reload request');
    });
    return this.chain;
  }

  private async apply(id: number): Promise<void> {
    if (id <= this.lastSeen) return;
    this.lastSeen = id;
    const outcome = await this.reloadLocal().catch((err: unknown): ReloadOutcome => ({
      result: 'rejected',
      problems: [errorMessage(err)],
    }));
    await sql`
      insert into kici_reload_results (request_id, instance_id, result, problems)
      values (${id}, ${this.instanceId}, ${outcome.result}, ${JSON.stringify(outcome.problems ?? [])})
      on conflict do nothing`.execute(this.db);
    this.log.info({ request: id, result: outcome.result }, 'cluster reload request applied');
    if (this.mine.has(id)) this.outcomes.set(id, outcome);
  }

  private async results(id: number): Promise<Map<string, InstanceReload>> {
    const rows = await sql<{ instance_id: string; result: string; problems: string[] }>`
      select instance_id, result, problems from kici_reload_results where request_id = ${id}`.execute(
      this.db,
    );
    return new Map(
      rows.rows.map((r) => [
        r.instance_id,
        { instance: r.instance_id, result: r.result, problems: r.problems },
      ]),
    );
  }
}
