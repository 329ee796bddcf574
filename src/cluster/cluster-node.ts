import type { ResyncHint } from '../dispatch/job-rows.js';
import type { Kysely } from 'kysely';
import type { Database, StoreEngine } from '../store/index.js';
import { AgentsRepo } from '../store/agents-repo.js';
import type { Clock } from '../util/clock.js';
import type { Logger } from '../util/logger.js';
import { InstancesRepo, type InstanceStatus } from './instances-repo.js';
import { PgLeaderLease, SoleLeader, type LeaderLease } from './leader-lease.js';
import { LeaderWork, type LeaderTask } from './leader-work.js';
import type { PeerPart } from './cluster-view.js';
import { InstancePresence, type PresenceFacts } from './presence.js';
import { QueueSync, type CatchUp } from './queue-sync.js';
import { BACKOFF_RESET_CHANNEL, BackoffResetFanout, type ApplyBackoffReset } from './backoff-resets.js';
import { RELOAD_CHANNEL, ReloadFanout, type ReloadOutcome } from './reload-fanout.js';
import { CANCEL_CHANNEL } from './remote-cancel.js';

export interface ClusterNodeOptions {
  db: Kysely<Database>;
  engine: StoreEngine;
  /** The PostgreSQL URL (the lease needs its own connection); unused on PGlite. */
  databaseUrl: string | undefined;
  instanceId: string;
  version: string;
  heartbeatMs: number;
  lockTimeoutMs: number;
  facts: Omit<PresenceFacts, 'isLeader'>;
  /** This instance's own scaler reload (SIGHUP's), run for every cluster reload request. */
  reloadLocal?: () => Promise<ReloadOutcome>;
  /** Lift a scaler's backoff in this instance's memory, for every cluster reset order. */
  resetBackoffLocal?: ApplyBackoffReset;
  /** How long a dead instance's agents get to come back elsewhere before its jobs are settled. */
  reconnectGraceMs?: number;
  /** Re-read queued rows into this instance's queue (shared queue; PostgreSQL only). */
  resyncQueue?: (hint?: ResyncHint) => Promise<unknown>;
  /** Carry out cancels peers asked of this instance's jobs (woken by their channel). */
  applyCancels?: () => Promise<unknown>;
  /** Read the agent tokens again (a peer may have issued or revoked one): on every poll. */
  refreshTokens?: () => Promise<unknown>;
  /** More leader-only work (retention, say), run beside the stale-instance sweep. */
  leaderTasks?: LeaderTask[];
  log: Logger;
  /** Paces the heartbeat, the lease, the leader's work and the queue poll (system clock by default). */
  clock?: Clock;
}

/**
 * This orchestrator as a cluster member: its presence row, the leader lease, and the work only
 * the leader does. On PGlite the same pieces run with a lease that is always held.
 */
export class ClusterNode {
  readonly repo: InstancesRepo;
  readonly lease: LeaderLease;
  readonly presence: InstancePresence;
  readonly work: LeaderWork;
  readonly queueSync: QueueSync | undefined;
  readonly reloads: ReloadFanout | undefined;
  readonly backoffResets: BackoffResetFanout | undefined;
  /** What live peers can scale for, as of the last poll (or the last judgement that needed it). */
  private peerSets: string[][] = [];

  constructor(private readonly opts: ClusterNodeOptions) {
    const log = opts.log.child({ component: 'cluster' });
    this.repo = new InstancesRepo(opts.db);
    this.lease =
      opts.engine === 'postgres' && opts.databaseUrl
        ? new PgLeaderLease({
            url: opts.databaseUrl,
            intervalMs: opts.heartbeatMs,
            lockTimeoutMs: opts.lockTimeoutMs,
            log,
            clock: opts.clock,
          })
        : new SoleLeader();
    this.presence = new InstancePresence(
      this.repo,
      opts.instanceId,
      opts.version,
      opts.heartbeatMs,
      { ...opts.facts, isLeader: () => this.lease.isLeader() },
      log,
      opts.clock,
    );
    // Status shows a change of leader at once, not on the next beat.
    this.lease.onChange(() => void this.presence.beatAfterChange());
    this.work = new LeaderWork(
      this.lease,
      [this.staleInstanceSweep(log), ...(opts.leaderTasks ?? [])],
      log,
      opts.clock,
    );
    this.reloads =
      opts.engine === 'postgres' && opts.reloadLocal
        ? new ReloadFanout(
            opts.db,
            opts.instanceId,
            opts.reloadLocal,
            () => this.repo.alivePeers(opts.instanceId),
            log,
          )
        : undefined;
    const resetLocal = opts.resetBackoffLocal;
    this.backoffResets =
      opts.engine === 'postgres' && resetLocal
        ? new BackoffResetFanout(
            opts.db,
            opts.instanceId,
            (order) => {
              const cleared = resetLocal(order);
              // Peers' views show the lift at once, not on the next beat.
              if (cleared.length) void this.presence.beat();
              return cleared;
            },
            () => this.repo.alivePeers(opts.instanceId),
            log,
          )
        : undefined;
    // One instance on PGlite holds the whole queue already: nothing to share. A queue wake-up
    // re-reads the queue alone; the other catch-ups run when their own channel rings and on the poll.
    const catchUps: CatchUp[] = [
      ...(this.backoffResets
        ? [{ channel: BACKOFF_RESET_CHANNEL, run: () => this.backoffResets!.catchUp(), first: true }]
        : []),
      { run: () => this.refreshPeerSets(), first: true },
      ...(opts.refreshTokens ? [{ run: opts.refreshTokens, first: true }] : []),
      ...(this.reloads ? [{ channel: RELOAD_CHANNEL, run: () => this.reloads!.catchUp() }] : []),
      ...(opts.applyCancels ? [{ channel: CANCEL_CHANNEL, run: opts.applyCancels }] : []),
    ];
    this.queueSync =
      opts.engine === 'postgres' && opts.resyncQueue
        ? new QueueSync({
            url: opts.databaseUrl,
            resync: opts.resyncQueue,
            catchUps,
            pollMs: opts.heartbeatMs,
            log,
            clock: opts.clock,
          })
        : undefined;
  }

  /**
   * Read again what live peers can scale for. The poll does it; so does a dispatch pass before it
   * judges a job "no backend" (a peer that just started may provision for it).
   */
  async refreshPeerSets(): Promise<void> {
    this.peerSets = await this.repo.peerScaleLabelSets(this.opts.instanceId);
  }

  /** Could a live peer's scaler provision an agent for these labels? (subset match) */
  peersCouldScale(runsOn: readonly string[]): boolean {
    return this.peerSets.some((set) => runsOn.every((l) => set.includes(l)));
  }

  async start(): Promise<void> {
    await this.reloads?.init();
    await this.backoffResets?.init();
    await this.presence.start();
    this.lease.start();
    this.queueSync?.start();
  }

  async stop(): Promise<void> {
    await this.queueSync?.stop();
    await this.work.stop();
    await this.lease.stop();
    await this.presence.stop();
  }

  /** The other instances' parts of the cluster view; one instance on PGlite has no peers. */
  async peerParts(): Promise<PeerPart[]> {
    return this.opts.engine === 'postgres' ? this.repo.peerParts(this.opts.instanceId) : [];
  }

  async status(): Promise<{ self: string; instances: InstanceStatus[] }> {
    return { self: this.opts.instanceId, instances: await this.repo.list() };
  }

  /**
   * Leader only: notice instances whose heartbeat stopped, drop their stale leader flag, and settle
   * the jobs they left once their agents had time to come back. Partition safety: while this leader
   * has met peers in its term but reaches none of them now, it may be the one cut off, so it does
   * nothing.
   */
  private staleInstanceSweep(log: Logger): LeaderTask {
    let seen = new Set<string>();
    let met = new Set<string>();
    let blocked = false;
    let term: AbortSignal | undefined;
    return {
      name: 'stale-instance-sweep',
      intervalMs: this.opts.heartbeatMs,
      run: async (signal) => {
        // Nothing carries over between terms (absence clocks reset on a change of leader).
        if (term !== signal) [term, seen, met] = [signal, new Set(), new Set()];
        const alive = await this.repo.alivePeers(this.opts.instanceId);
        for (const id of alive) met.add(id);
        const cutOff = met.size > 0 && alive.length === 0;
        if (cutOff !== blocked)
          log.warn(
            { met: [...met] },
            cutOff ? 'reaching none of the known peers: the leader holds off' : 'peers reachable again',
          );
        blocked = cutOff;
        if (cutOff || signal.aborted) return;
        const dead = await this.repo.sweepDead();
        for (const id of dead)
          if (!seen.has(id)) {
            seen.add(id);
            log.warn({ instance: id }, 'instance stopped heartbeating; declared dead');
          }
        if (signal.aborted || dead.length === 0) return;
        // Rows of agents that came back on another instance carry that instance's id by now.
        await new AgentsRepo(this.opts.db).markGoneOf(dead, new Date());
        const settled = await this.repo.settleJobsOfDead(this.opts.reconnectGraceMs ?? 30_000);
        if (settled.requeued.length || settled.failed.length)
          log.warn(settled, 'settled the jobs of dead instances whose agents did not come back');
      },
    };
  }
}
