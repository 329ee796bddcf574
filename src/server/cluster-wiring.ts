import type { ApplyBackoffReset } from '../cluster/backoff-resets.js';
import { ClusterNode } from '../cluster/cluster-node.js';
import type { LeaderTask } from '../cluster/leader-work.js';
import { InstancesRepo, type InstanceStatus } from '../cluster/instances-repo.js';
import type { LiveScalerSettings } from '../cluster/live-settings.js';
import { claimForScaling } from '../cluster/queue-sync.js';
import { applyCancelRequests, type RemoteCancelDeps } from '../cluster/remote-cancel.js';
import type { ReloadOutcome } from '../cluster/reload-fanout.js';
import type { Dispatcher, DispatcherOptions } from '../dispatch/dispatcher.js';
import type { ScalerManager } from '../scaler/manager.js';
import type { OpenedDatabase, Store } from '../store/index.js';
import { systemClock, type Clock } from '../util/clock.js';
import type { Logger } from '../util/logger.js';
import { packageVersion } from '../version.js';
import { instancePart } from './instance-part.js';
import type { OrchestratorOptions } from './orchestrator-options.js';

export interface ClusterTiming {
  heartbeatMs: number;
  lockTimeoutMs: number;
}

/** What the cluster node reads of this instance once it runs. */
export interface ClusterStartDeps {
  store: Store;
  dispatcher: Dispatcher;
  scaler: ScalerManager | undefined;
  /** The URL this instance answers on, known once it listens. */
  url: () => string;
  reloadLocal: () => Promise<ReloadOutcome>;
  /** Lift a scaler's backoff in this instance's memory, for every cluster reset order. */
  resetBackoffLocal: ApplyBackoffReset;
  leaderTasks: LeaderTask[];
  onLeaderChange: (leader: boolean) => void;
}

/**
 * This orchestrator's part in a cluster: its presence heartbeat (with its part of the cluster
 * view), the leader lease and the leader's tasks, the live cluster settings, and what the
 * dispatcher and a cancel ask about peers.
 */
export class ClusterWiring {
  private node: ClusterNode | undefined;
  /** The node the dispatcher asks about peers; set only once the node and the settings run. */
  private running: ClusterNode | undefined;
  private readonly clock: Clock;

  constructor(
    private readonly deps: {
      opts: OrchestratorOptions;
      database: OpenedDatabase;
      instanceId: string;
      live: LiveScalerSettings;
      timing: ClusterTiming;
      log: Logger;
    },
  ) {
    this.clock = deps.opts.clock ?? systemClock;
  }

  get live(): LiveScalerSettings {
    return this.deps.live;
  }

  /** The dispatcher's view of peers on a shared PostgreSQL; nothing on the embedded store. */
  dispatchOptions(): Partial<DispatcherOptions> {
    const { database, instanceId } = this.deps;
    if (database.engine !== 'postgres') return {};
    return {
      instanceId,
      scaleClaim: (jobId: string) => claimForScaling(database.db, jobId, instanceId),
      peersCould: (runsOn: readonly string[]) => this.running?.peersCouldScale(runsOn) ?? false,
      refreshPeers: async () => this.running?.refreshPeerSets(),
      // Unknown until the cluster node runs: counted alive, so nothing is failed too early.
      peerAlive: async (id: string) =>
        this.running ? (await this.running.repo.alivePeers(instanceId)).includes(id) : true,
    };
  }

  /** Heartbeat this instance into kici_instances, then follow the cluster-wide settings. */
  async start(s: ClusterStartDeps): Promise<void> {
    const { opts, database, instanceId, timing, log } = this.deps;
    const node = new ClusterNode({
      db: database.db,
      engine: database.engine,
      databaseUrl: opts.databaseUrl,
      instanceId,
      version: packageVersion(),
      ...timing,
      facts: {
        address: () => process.env.KICI_ADVERTISE_URL || s.url(),
        agentsConnected: () => s.dispatcher.registry.list().length,
        jobsRunning: () => s.dispatcher.active.size,
        scaleLabelSets: () =>
          s.scaler?.scalerEntries().flatMap((e) => e.entry.labelSets.map((ls) => [...ls.labels])) ?? [],
        // Only peers read it: one instance on PGlite answers from its live state.
        ...(database.engine === 'postgres' && {
          part: () => instancePart(s.dispatcher, this.clock, opts.scalerConfigPath),
        }),
      },
      resyncQueue: (hint) => s.dispatcher.resyncQueued(hint),
      applyCancels: () => applyCancelRequests(this.cancelDeps(s.store, s.dispatcher)),
      refreshTokens: () => s.dispatcher.refreshStaticScopes(),
      reconnectGraceMs: s.dispatcher.reconnectGraceMs,
      reloadLocal: s.reloadLocal,
      resetBackoffLocal: s.resetBackoffLocal,
      leaderTasks: s.leaderTasks,
      log,
      clock: opts.clock,
    });
    this.node = node;
    node.lease.onChange(s.onLeaderChange);
    await node.start();
    // Changes made through a peer arrive with the heartbeat's rhythm.
    await this.deps.live.start(this.clock, timing.heartbeatMs);
    this.running = node;
  }

  /** What a cancel needs to reach a job held by another instance. */
  cancelDeps(store: Store, dispatcher: Dispatcher): RemoteCancelDeps {
    return {
      store,
      dispatcher,
      clock: this.clock,
      instanceId: this.deps.instanceId,
      aliveInstances: async () =>
        (await this.status()).instances.filter((i) => i.state === 'alive').map((i) => i.id),
      log: this.deps.log,
    };
  }

  /** The instances sharing this database, for `kici-admin cluster status`. */
  async status(): Promise<{ self: string; instances: InstanceStatus[] }> {
    return this.node
      ? this.node.status()
      : { self: this.deps.instanceId, instances: await new InstancesRepo(this.deps.database.db).list() };
  }

  /** The other instances' parts of the cluster view (none before the node runs). */
  async peerParts(): Promise<Awaited<ReturnType<ClusterNode['peerParts']>>> {
    return (await this.node?.peerParts()) ?? [];
  }

  isLeader(): boolean {
    return this.node?.lease.isLeader() ?? false;
  }

  /** Asks every live instance to reload (PostgreSQL only; undefined alone). */
  get reloads(): ClusterNode['reloads'] {
    return this.node?.reloads;
  }

  /** Asks every live instance to lift a backoff (PostgreSQL only; undefined alone). */
  get backoffResets(): ClusterNode['backoffResets'] {
    return this.node?.backoffResets;
  }

  /** Stop following the cluster-wide settings (early in a stop, before the scaler winds down). */
  stopSettings(): void {
    this.deps.live.stop();
  }

  /** Leave the cluster: the last step before the store closes. */
  async stop(): Promise<void> {
    await this.node?.stop();
  }
}
