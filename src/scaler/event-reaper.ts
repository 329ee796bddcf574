import { sql, type Kysely } from 'kysely';
import { TERMINAL_JOB_STATES, type Database } from '../store/schema.js';
import { ClaimsRepo } from '../store/claims-repo.js';
import type { Clock } from '../util/clock.js';
import { errorMessage } from '../util/errors.js';
import type { Logger } from '../util/logger.js';
import { isPending } from './agent-lifecycle.js';
import type { ScalerManager } from './manager.js';
import type { ScalerBackend } from './types.js';

export const DEFAULT_CLAIM_RETENTION_MS = 3_600_000;
const LEASE_KEY = 'kici:scaler:event-reaper';

/** The event backend's extras the reaper uses (it cannot import the backend folder). */
interface EventBackendView extends ScalerBackend {
  forget(agentId: string): void;
  destroy(agentId: string, ctx: { reason: 'spawn-timeout' | 'job-complete' }): Promise<void>;
}

export interface EventReaperOptions {
  db: Kysely<Database>;
  engine: 'pglite' | 'postgres';
  manager: ScalerManager;
  instanceId: string;
  clock: Clock;
  logger: Logger;
  spawnTimeoutMs: number;
  intervalMs: number;
  claimRetentionMs?: number;
}

/**
 * Tears down event provisions whose agent never registered within the spawn deadline (reason
 * `spawn-timeout`) and purges expired claim codes. Only the holder of the reaper lease acts: on
 * PostgreSQL a session advisory lock held on one pinned connection, so exactly one orchestrator of
 * those sharing the store reaps; the embedded store has one orchestrator, which always holds it.
 */
export class EventProvisionReaper {
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;
  private leader = false;
  private leaseTask: Promise<void> | undefined;
  private releaseLease: (() => void) | undefined;
  private ticking: Promise<void> | undefined;
  /** Event provisions past their spawn deadline with no registered agent, at the last pass. */
  unseenProvisions = 0;
  /** The last pass could not finish its reaping (a failed pass, or a provision it could not reap). */
  blocked = false;
  /** Provisions this instance tore down as the reaper (tests and status read it). */
  reaped = 0;
  private readonly log: Logger;
  private readonly claims: ClaimsRepo;

  constructor(private readonly opts: EventReaperOptions) {
    this.log = opts.logger.child({ component: 'event-reaper', instanceId: opts.instanceId });
    this.claims = new ClaimsRepo(opts.db);
  }

  get isLeader(): boolean {
    return this.leader;
  }

  start(): void {
    this.timer = setInterval(() => void this.tick(), this.opts.intervalMs);
    this.timer.unref();
    void this.tick();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    await this.ticking;
    this.releaseLease?.();
    await this.leaseTask;
  }

  /** One pass; never throws. Overlapping ticks are skipped. */
  tick(): Promise<void> {
    if (this.ticking || this.stopped) return this.ticking ?? Promise.resolve();
    this.ticking = this.pass()
      .catch((err: unknown) => {
        this.blocked = true;
        this.log.error({ err: errorMessage(err) }, 'event reaper pass failed');
      })
      .finally(() => (this.ticking = undefined));
    return this.ticking;
  }

  private async pass(): Promise<void> {
    await this.withdrawReapedByPeer();
    if (!this.leader) await this.tryLease();
    if (!this.leader || this.stopped) return;
    const now = this.opts.clock.now();
    const rows = await this.opts.db
      .selectFrom('scaler_spawning_agents')
      .selectAll()
      .where('backend_type', '=', 'event')
      .where('registered_at', 'is', null)
      .where('spawned_at', '<', new Date(now - this.opts.spawnTimeoutMs))
      .execute();
    this.unseenProvisions = rows.length;
    let blocked = false;
    for (const row of rows) {
      if (!this.leader || this.stopped) return;
      try {
        await this.reap(
          row.agent_id,
          row.scaler_name,
          row.owner_instance_id,
          row.label_set,
          row.bound_job_id,
        );
      } catch (err) {
        // One row's failure does not stop the sweep; the next pass tries it again.
        this.log.warn({ agentId: row.agent_id, err: errorMessage(err) }, 'could not reap a provision');
        blocked = true;
      }
    }
    this.blocked = blocked;
    const purged = await this.claims.purgeExpired(
      new Date(now - (this.opts.claimRetentionMs ?? DEFAULT_CLAIM_RETENTION_MS)),
    );
    if (purged) this.log.info({ purged }, 'expired claim codes purged');
    // An outcome answers "was it adopted?" for a spawner's stale prune, which runs a spawn deadline
    // after the provision; kept for twice that, and at least the claim retention.
    const keep = Math.max(
      this.opts.claimRetentionMs ?? DEFAULT_CLAIM_RETENTION_MS,
      2 * this.opts.spawnTimeoutMs,
    );
    const outcomes = await this.opts.manager.adoption.purgeOutcomes(new Date(now - keep));
    if (outcomes) this.log.info({ purged: outcomes }, 'old provision outcomes purged');
  }

  private async reap(
    agentId: string,
    scaler: string,
    owner: string | null,
    labelSet: string[],
    boundJobId: string | null,
  ) {
    const m = this.opts.manager.state.agents.get(agentId);
    const seconds = Math.round(this.opts.spawnTimeoutMs / 1000);
    // A provision whose job already ended (cancelled, say) is simply no longer needed: no failure.
    const job = boundJobId
      ? await this.opts.db.selectFrom('jobs').select('state').where('id', '=', boundJobId).executeTakeFirst()
      : undefined;
    const ended = job !== undefined && TERMINAL_JOB_STATES.includes(job.state);
    const reason = ended ? 'job-complete' : 'spawn-timeout';
    this.log.warn(
      { agentId, scaler, owner, reason },
      ended
        ? `event provision for ended job ${boundJobId} never registered; tearing it down`
        : `event provision did not register within ${seconds}s; reaping`,
    );
    this.reaped++;
    if (owner === this.opts.instanceId && m && isPending(m.phase) && ended) {
      m.abort.abort(new Error('bound job ended'));
      await this.opts.manager.teardown(m, 'job-complete');
      return;
    }
    if (owner === this.opts.instanceId && m && isPending(m.phase)) {
      // Ours: the manager's failure path emits the scale-down, frees the cap and leaves the job queued.
      await this.opts.manager.failSpawn(m, {
        kind: 'spawn-timeout',
        message: `the provisioned instance's agent ${agentId} did not register within ${seconds}s`,
        deterministic: false,
      });
      return;
    }
    const backend = this.opts.manager.state.backends.get(scaler) as EventBackendView | undefined;
    if (backend?.type !== 'event' || !backend.adopt) {
      this.log.error({ agentId, scaler }, 'no event scaler of that name here; every orchestrator needs it');
      return;
    }
    // A peer's (or a gone process's) provision: adopt it so destroy emits, then drop its record.
    await backend.adopt(agentId, labelSet, agentId);
    await backend.destroy(agentId, { reason });
    await this.opts.db.transaction().execute(async (trx) => {
      await trx.deleteFrom('scaler_spawning_agents').where('agent_id', '=', agentId).execute();
      await trx.deleteFrom('scaler_reservations').where('agent_id', '=', agentId).execute();
    });
  }

  /**
   * Our stale pending event entries. Adopted by a peer (the row, or its outcome once the row is
   * gone, says so): forget it quietly, the adopter owns its teardown. Record removed by the lease
   * holder and never adopted: give the job back as a failed provision, emit nothing.
   */
  private async withdrawReapedByPeer(): Promise<void> {
    const mgr = this.opts.manager;
    const limit = this.opts.clock.now() - this.opts.spawnTimeoutMs;
    const stale = mgr
      .entries()
      .filter((m) => m.type === 'event' && m.phase === 'starting' && m.createdAtMs < limit);
    if (!stale.length) return;
    const ids = stale.map((m) => m.agentId);
    const adopters = await mgr.adoption.adopters(ids);
    const present = new Set(
      (
        await this.opts.db
          .selectFrom('scaler_spawning_agents')
          .select('agent_id')
          .where('agent_id', 'in', ids)
          .execute()
      ).map((r) => r.agent_id),
    );
    for (const m of stale) {
      const adopter = adopters.get(m.agentId);
      if (adopter && adopter !== this.opts.instanceId) {
        if (mgr.state.agents.get(m.agentId) !== m) continue;
        (mgr.state.backends.get(m.scalerName) as EventBackendView | undefined)?.forget(m.agentId);
        mgr.forget(m);
        this.log.info(
          { agentId: m.agentId, adoptedBy: adopter },
          'provision adopted by a peer; forgotten here',
        );
        mgr.notifyCapacityFreed();
        continue;
      }
      if (present.has(m.agentId)) continue;
      (mgr.state.backends.get(m.scalerName) as EventBackendView | undefined)?.forget(m.agentId);
      await mgr.failSpawn(m, {
        kind: 'spawn-timeout',
        message: `the provisioned instance's agent ${m.agentId} did not register in time (reaped by the lease holder)`,
        deterministic: false,
      });
    }
  }

  private async tryLease(): Promise<void> {
    if (this.opts.engine === 'pglite') {
      this.leader = true;
      return;
    }
    if (this.leaseTask) return;
    let acquired!: (ok: boolean) => void;
    const got = new Promise<boolean>((r) => (acquired = r));
    this.leaseTask = this.opts.db
      .connection()
      .execute(async (conn) => {
        const res = await sql<{
          ok: boolean;
        }>`select pg_try_advisory_lock(hashtext(${LEASE_KEY})) as ok`.execute(conn);
        if (!res.rows[0]?.ok) return acquired(false);
        this.leader = true;
        acquired(true);
        this.log.info('this orchestrator holds the event reaper lease');
        // Hold the connection (and so the lock) until stop; a failing ping means the lease is gone.
        while (!this.stopped) {
          await new Promise<void>((r) => {
            const t = setTimeout(r, this.opts.intervalMs);
            this.releaseLease = () => (clearTimeout(t), r());
          });
          if (!this.stopped) await sql`select 1`.execute(conn);
        }
        await sql`select pg_advisory_unlock(hashtext(${LEASE_KEY}))`.execute(conn);
      })
      .catch((err: unknown) => {
        acquired(false);
        this.log.warn({ err: errorMessage(err) }, 'event reaper lease lost');
      })
      .finally(() => {
        this.leader = false;
        this.leaseTask = undefined;
      });
    await got;
  }
}
