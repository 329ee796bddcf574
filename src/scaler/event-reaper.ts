import type { Kysely } from 'kysely';
import type { LeaderTask } from '../cluster/leader-work.js';
import { AdoptionRepo } from '../store/adoption-repo.js';
import type { Database } from '../store/schema.js';
import { ClaimsRepo } from '../store/claims-repo.js';
import { monoNow, type Clock } from '../util/clock.js';
import { errorMessage } from '../util/errors.js';
import type { Logger } from '../util/logger.js';
import type { ScalerManager } from './manager.js';
import {
  decideReap,
  emptyReapMemory,
  type ReapAction,
  type ReapMemory,
  type ReapWindows,
} from './reap-decide.js';
import { tearDownReaped } from './reap-teardown.js';
import { readReapSnapshot, type ReapRowFull } from './reap-view.js';
import { withdrawReapedByPeer } from './reaped-by-peer.js';

export const DEFAULT_CLAIM_RETENTION_MS = 3_600_000;
/** The windows' defaults: the serve command's settings replace them. */
export const DEFAULT_REAP_WINDOWS: Omit<ReapWindows, 'spawnTimeoutMs'> = {
  strandedTimeoutMs: 1_800_000,
  flapGraceMs: 120_000,
  reattemptIntervalMs: 600_000,
};
/** A signal that never aborts: a reaper driven by hand (tests) leads for its whole life. */
const FOREVER = new AbortController().signal;

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
  /** Flap grace, stranded timeout and re-attempt throttle (defaults: DEFAULT_REAP_WINDOWS). */
  windows?: Partial<Omit<ReapWindows, 'spawnTimeoutMs'>>;
  /** Is this agent's socket on this instance? (the dispatcher's registry) */
  connectedHere?: (agentId: string) => boolean;
  /** Peers configured up front, known before any of them was seen. */
  staticPeers?: number;
  /** Values an admin may change while running (cluster settings), read on each use over the above. */
  live?: LiveReapTuning;
}

/** The reaper's tuning as it stands now; each read may differ from the last. */
export interface LiveReapTuning {
  windows(): Omit<ReapWindows, 'spawnTimeoutMs'>;
  claimRetentionMs(): number;
  intervalMs(): number;
}

/**
 * The backstop for event provisions nobody else will end: those whose holder (the instance that
 * provisioned or adopted them) died or lost them, and those whose agent never registered. The
 * leader decides (reap-decide.ts) on each pass of its leader task: a provision must stay unseen
 * anywhere this instance can see for the whole flap grace, nothing is reaped while this instance
 * sees none of its peers, and a failed teardown waits out the re-attempt throttle. Every instance
 * also runs `start()`'s timer: its own provisions that a peer adopted or the leader reaped are
 * dropped from its books (reaped-by-peer.ts). Expired claim codes and old outcomes are purged by
 * the leader too.
 */
export class EventProvisionReaper {
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;
  private ticking: Promise<void> | undefined;
  private reaping: Promise<void> | undefined;
  private term: AbortSignal | undefined;
  private memory: ReapMemory = emptyReapMemory();
  /** Peers ever seen alive by this process: the partition guard's "known" peers. */
  private readonly met = new Set<string>();
  #unseenProvisions = 0;
  #blocked = false;
  #reaped = 0;
  private readonly log: Logger;
  private readonly claims: ClaimsRepo;
  private readonly outcomes: AdoptionRepo;
  private readonly fixedWindows: ReapWindows;

  constructor(private readonly opts: EventReaperOptions) {
    this.log = opts.logger.child({ component: 'event-provision-reaper', instanceId: opts.instanceId });
    this.claims = new ClaimsRepo(opts.db);
    this.outcomes = new AdoptionRepo(opts.db);
    this.fixedWindows = { ...DEFAULT_REAP_WINDOWS, ...opts.windows, spawnTimeoutMs: opts.spawnTimeoutMs };
  }

  private get windows(): ReapWindows {
    const live = this.opts.live?.windows();
    return live ? { ...live, spawnTimeoutMs: this.opts.spawnTimeoutMs } : this.fixedWindows;
  }

  private get claimRetentionMs(): number {
    return this.opts.live?.claimRetentionMs() ?? this.opts.claimRetentionMs ?? DEFAULT_CLAIM_RETENTION_MS;
  }

  private get intervalMs(): number {
    return this.opts.live?.intervalMs() ?? this.opts.intervalMs;
  }

  /** Gauge: provisions unseen anywhere for at least the flap grace (as of the last leader pass). */
  get unseenProvisions(): number {
    return this.#unseenProvisions;
  }

  /** Gauge: the partition guard holds (this leader sees none of the peers it knows). */
  get blocked(): boolean {
    return this.#blocked;
  }

  /** Provisions this instance tore down as the reaper (tests and status read it). */
  get reaped(): number {
    return this.#reaped;
  }

  get isLeader(): boolean {
    return this.term !== undefined && !this.term.aborted;
  }

  /** The leader-only part, for the cluster's leader work loop. */
  leaderTask(): LeaderTask {
    // A getter: the leader work loop re-reads it for every pass, so a changed setting applies.
    const intervalMs = () => this.intervalMs;
    return {
      name: 'event-provision-reaper',
      get intervalMs() {
        return intervalMs();
      },
      run: (signal) => (this.stopped ? Promise.resolve() : this.leaderPass(signal)),
    };
  }

  /** Every instance: drop own provisions a peer adopted or the leader reaped. */
  start(): void {
    this.timer = setInterval(() => void this.tick(FOREVER, false), this.intervalMs);
    this.timer.unref();
    void this.tick(FOREVER, false);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    await this.ticking;
    await this.reaping;
  }

  /**
   * One pass by hand; never throws; overlapping ticks are skipped. With `lead` (the default) it
   * also makes a leader pass, as if this instance led for as long as `signal` is not aborted.
   */
  tick(signal: AbortSignal = FOREVER, lead = true): Promise<void> {
    if (this.ticking || this.stopped) return this.ticking ?? Promise.resolve();
    this.ticking = withdrawReapedByPeer({ ...this.opts, log: this.log })
      .then(() => (lead ? this.leaderPass(signal) : undefined))
      .catch((err: unknown) => this.log.error({ err: errorMessage(err) }, 'event reaper pass failed'))
      .finally(() => (this.ticking = undefined));
    return this.ticking;
  }

  private leaderPass(signal: AbortSignal): Promise<void> {
    if (this.reaping) return this.reaping;
    this.reaping = this.reapPass(signal).finally(() => (this.reaping = undefined));
    return this.reaping;
  }

  /** A new term starts from nothing: no clocks, no attempts; losing it publishes zeros. */
  private beginTerm(signal: AbortSignal): void {
    this.term = signal;
    this.memory = emptyReapMemory();
    this.log.info('this orchestrator holds the event reaper lease');
    signal.addEventListener('abort', () => {
      if (this.term !== signal) return;
      this.memory = emptyReapMemory();
      this.#blocked = false;
      this.#unseenProvisions = 0;
    });
  }

  private async reapPass(signal: AbortSignal): Promise<void> {
    if (this.term !== signal) this.beginTerm(signal);
    const now = this.opts.clock.now();
    const snap = await readReapSnapshot(
      this.opts.db,
      this.opts.instanceId,
      now,
      this.opts.connectedHere ?? (() => false),
    );
    if (signal.aborted || this.stopped) return;
    for (const [id, p] of snap.peers) if (p.alive) this.met.add(id);
    const decision = decideReap(
      {
        nowMono: monoNow(this.opts.clock),
        selfId: this.opts.instanceId,
        rows: snap.rows,
        seen: snap.seen,
        peers: snap.peers,
        knownPeers: this.met.size + (this.opts.staticPeers ?? 0),
        windows: this.windows,
      },
      this.memory,
    );
    this.memory = decision.memory;
    this.#blocked = decision.blocked;
    this.#unseenProvisions = decision.unseen;
    const rows = new Map(snap.rows.map((r) => [r.agentId, r]));
    for (const action of decision.actions) {
      if (signal.aborted || this.stopped) return;
      await this.act(action, rows, now);
    }
    await this.purge(now);
  }

  private async act(a: ReapAction, rows: Map<string, ReapRowFull>, now: number): Promise<void> {
    switch (a.kind) {
      case 'blocked':
        if (a.blocked)
          this.log.warn(
            { knownPeers: a.knownPeers },
            'reaching none of the known peers: no event provision is reaped until one answers',
          );
        else this.log.info('peers reachable again: event provisions may be reaped');
        return;
      case 'clock-started':
        this.log.info({ agentId: a.agentId }, 'starting absence clock');
        return;
      case 'clock-cleared':
        this.log.info({ agentId: a.agentId, unseenMs: a.unseenMs }, 'absence clock cleared');
        return;
      case 'unowned':
        this.log.warn({ agentId: a.agentId }, 'event provision with no recorded owner; left alone');
        return;
      case 'reap':
        return this.reap(a, rows.get(a.agentId)!, now);
    }
  }

  private async reap(a: Extract<ReapAction, { kind: 'reap' }>, row: ReapRowFull, now: number) {
    const at = { agentId: a.agentId, scaler: a.scalerName, reason: a.reason, holder: a.holder };
    try {
      const won = await this.outcomes.condemn(
        a.agentId,
        a.scalerName,
        a.reason,
        this.opts.instanceId,
        new Date(now),
        new Date(now - this.windows.reattemptIntervalMs),
      );
      if (!won) {
        this.log.info(at, 'another reaper condemned this provision recently; left to it');
        return;
      }
      this.log.warn({ ...at, unseenMs: a.unseenMs }, 'Reaping stranded event-scaler provision');
      await tearDownReaped(
        this.opts.manager,
        this.opts.instanceId,
        row,
        a.reason,
        this.opts.spawnTimeoutMs,
        this.log,
      );
      this.#reaped++;
    } catch (err) {
      // One row's failure does not stop the sweep; the throttle says when it is tried again.
      this.log.warn({ ...at, err: errorMessage(err) }, 'could not reap a provision; will try again later');
    }
  }

  private async purge(now: number): Promise<void> {
    const purged = await this.claims.purgeExpired(new Date(now - this.claimRetentionMs));
    if (purged) this.log.info({ purged }, 'expired claim codes purged');
    // An outcome answers "was it adopted?" for a spawner's stale prune, which runs a spawn deadline
    // after the provision, and records how it ended: kept a day, or twice the spawn deadline.
    const keep = Math.max(24 * 3_600_000, 2 * this.opts.spawnTimeoutMs);
    const outcomes = await this.opts.manager.adoption.purgeOutcomes(new Date(now - keep));
    if (outcomes) this.log.info({ purged: outcomes }, 'old provision outcomes purged');
  }
}
