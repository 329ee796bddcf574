import { sql, type Kysely } from 'kysely';
import type { Database } from '../store/schema.js';
import type { InstancePart, InstanceState, PeerPart } from './cluster-view.js';

/** What one orchestrator reports about itself on every heartbeat. */
export interface InstanceBeat {
  id: string;
  address: string;
  version: string;
  heartbeatMs: number;
  agentsConnected: number;
  jobsRunning: number;
  leader: boolean;
  /** Label sets this instance's scalers provision for (peers read them). */
  scaleLabelSets?: string[][];
  /** This instance's part of the cluster view, as JSON; absent when unchanged since the last beat. */
  part?: string;
}

export type { InstanceState } from './cluster-view.js';

/** An instance as `kici-admin cluster status` shows it. */
export interface InstanceStatus {
  id: string;
  address: string;
  version: string;
  state: InstanceState;
  leader: boolean;
  startedAt: string;
  lastHeartbeatAt: string;
  /** Age of the last heartbeat on the database's clock. */
  heartbeatAgeMs: number;
  heartbeatMs: number;
  agentsConnected: number;
  jobsRunning: number;
  stoppedAt: string | null;
}

/** Missed beats before an instance counts as dead: the grace before the leader settles its jobs. */
export const DEAD_AFTER_BEATS = 3;

/** The `kici_instances` table: presence rows, written with the database's `now()`. */
export class InstancesRepo {
  constructor(private readonly db: Kysely<Database>) {}

  /** Upsert this instance's row. `starting` begins a new life: start time reset, "stopped" cleared. */
  async beat(b: InstanceBeat, starting = false): Promise<void> {
    const values = {
      id: b.id,
      address: b.address,
      version: b.version,
      heartbeat_ms: b.heartbeatMs,
      agents_connected: b.agentsConnected,
      jobs_running: b.jobsRunning,
      leader: b.leader,
      scale_label_sets: JSON.stringify(b.scaleLabelSets ?? []),
      last_heartbeat: sql<Date>`now()`,
      ...(b.part !== undefined ? { part: b.part } : {}),
    };
    await this.db
      .insertInto('kici_instances')
      .values({ ...values, started_at: sql<Date>`now()` })
      .onConflict((oc) =>
        oc.column('id').doUpdateSet({
          ...values,
          ...(starting ? { started_at: sql<Date>`now()`, stopped_at: null } : {}),
        }),
      )
      .execute();
  }

  /** A clean stop: the row stays (history for operators) but is no longer a live peer. */
  async markStopped(id: string): Promise<void> {
    await this.db
      .updateTable('kici_instances')
      // Its agents and scalers are gone with it: no part is left to show.
      .set({ stopped_at: sql<Date>`now()`, leader: false, part: null })
      .where('id', '=', id)
      .execute();
  }

  /** Rows whose heartbeat is past the grace (leader's stale-instance sweep); their leader flag is cleared. */
  async sweepDead(): Promise<string[]> {
    const rows = await this.db
      .updateTable('kici_instances')
      .set({ leader: false })
      .where('stopped_at', 'is', null)
      .where(
        sql<boolean>`last_heartbeat < now() - ${DEAD_AFTER_BEATS} * heartbeat_ms * interval '1 millisecond'`,
      )
      .returning('id')
      .execute();
    return rows.map((r) => r.id);
  }

  /** Label sets the other live instances can scale for. */
  async peerScaleLabelSets(selfId: string): Promise<string[][]> {
    const rows = await this.db
      .selectFrom('kici_instances')
      .select('scale_label_sets')
      .where('id', '<>', selfId)
      .where('stopped_at', 'is', null)
      .where(
        sql<boolean>`last_heartbeat > now() - ${DEAD_AFTER_BEATS} * heartbeat_ms * interval '1 millisecond'`,
      )
      .execute();
    return rows.flatMap((r) => r.scale_label_sets);
  }

  /**
   * Jobs left by instances dead for longer than `graceMs` past the dead mark (time for their agents
   * to come back elsewhere): a dispatched job goes back to the queue, a running one fails, as a
   * single instance does for an agent that did not return. Each is one conditional update.
   */
  async settleJobsOfDead(graceMs: number): Promise<{ requeued: string[]; failed: string[] }> {
    const deadLongEnough = sql<boolean>`owner_instance in (
      select i.id from kici_instances i
       where i.stopped_at is null
         and i.last_heartbeat < now() - (${DEAD_AFTER_BEATS} * i.heartbeat_ms + ${graceMs}) * interval '1 millisecond')`;
    const requeued = await this.db
      .updateTable('jobs')
      .set({ state: 'queued', agent_id: null, dispatched_at: null, owner_instance: null })
      .where('state', '=', 'dispatched')
      .where(deadLongEnough)
      .returning('id')
      .execute();
    const failed = await this.db
      .updateTable('jobs')
      .set({
        state: 'failed',
        finished_at: sql<Date>`now()`,
        reason: sql<string>`'orchestrator instance ' || owner_instance || ' died; agent ' || coalesce(agent_id, '?') || ' did not come back; the job was running and is not retried'`,
      })
      .where('state', '=', 'running')
      .where(deadLongEnough)
      .returning('id')
      .execute();
    return { requeued: requeued.map((r) => r.id), failed: failed.map((r) => r.id) };
  }

  /** Ids of the other instances that are alive now. */
  async alivePeers(selfId: string): Promise<string[]> {
    return (await this.list()).filter((i) => i.id !== selfId && i.state === 'alive').map((i) => i.id);
  }

  /** The published parts of the other instances that have not stopped cleanly, with their presence. */
  async peerParts(selfId: string): Promise<PeerPart[]> {
    const rows = await this.db
      .selectFrom('kici_instances')
      .select(['id', 'part'])
      .where('id', '<>', selfId)
      .where('stopped_at', 'is', null)
      .where('part', 'is not', null)
      .orderBy('id')
      .execute();
    if (!rows.length) return [];
    const presence = new Map((await this.list()).map((i) => [i.id, i]));
    return rows.flatMap((r) => {
      const p = presence.get(r.id);
      return p
        ? [{ instance: r.id, state: p.state, heartbeatAgeMs: p.heartbeatAgeMs, part: r.part as InstancePart }]
        : [];
    });
  }

  async list(): Promise<InstanceStatus[]> {
    const rows = await this.db
      .selectFrom('kici_instances')
      // Every column but the published part, which only the merged views read.
      .select([
        'id',
        'address',
        'version',
        'heartbeat_ms',
        'started_at',
        'last_heartbeat',
        'agents_connected',
        'jobs_running',
        'leader',
        'stopped_at',
      ])
      .select(sql<string>`floor(extract(epoch from (now() - last_heartbeat)) * 1000)`.as('age_ms'))
      .orderBy('id')
      .execute();
    return rows.map((r) => {
      const ageMs = Math.max(0, Number(r.age_ms));
      const state: InstanceState = r.stopped_at
        ? 'stopped'
        : ageMs > DEAD_AFTER_BEATS * r.heartbeat_ms
          ? 'dead'
          : 'alive';
      return {
        id: r.id,
        address: r.address,
        version: r.version,
        state,
        // A dead or stopped instance holds no lease, whatever its last row said.
        leader: state === 'alive' && r.leader,
        startedAt: r.started_at.toISOString(),
        lastHeartbeatAt: r.last_heartbeat.toISOString(),
        heartbeatAgeMs: ageMs,
        heartbeatMs: r.heartbeat_ms,
        agentsConnected: r.agents_connected,
        jobsRunning: r.jobs_running,
        stoppedAt: r.stopped_at?.toISOString() ?? null,
      };
    });
  }
}
