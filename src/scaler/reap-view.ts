import type { Kysely } from 'kysely';
import { InstancesRepo } from '../cluster/instances-repo.js';
import { PEER_ADOPTABLE_ROW } from '../store/peer-adoptable.js';
import { TERMINAL_JOB_STATES, type Database } from '../store/schema.js';
import type { PeerView, ReapRow } from './reap-decide.js';

/** A spawn row with what the teardown needs beyond the decision's view of it. */
export interface ReapRowFull extends ReapRow {
  labelSet: string[];
  provisioningTargets: string[];
}

/** Everything the reaper reads from the store for one pass. */
export interface ReapSnapshot {
  rows: ReapRowFull[];
  peers: Map<string, PeerView>;
  /** Agents whose socket is on this instance or on a live peer, among the rows' agents. */
  seen: Set<string>;
}

/**
 * Read one pass's input. A peer counts as visible while its heartbeat is fresh (judged on the
 * database's clock); an agent counts as seen while the local registry has it, or its row says it
 * is connected to a visible peer (this instance's own rows may be stale after a restart).
 */
export async function readReapSnapshot(
  db: Kysely<Database>,
  selfId: string,
  nowMs: number,
  connectedHere: (agentId: string) => boolean,
): Promise<ReapSnapshot> {
  const raw = await db
    .selectFrom('scaler_spawning_agents')
    .leftJoin('jobs', 'jobs.id', 'scaler_spawning_agents.bound_job_id')
    .select([
      'scaler_spawning_agents.agent_id',
      'scaler_spawning_agents.scaler_name',
      'scaler_spawning_agents.owner_instance_id',
      'scaler_spawning_agents.adopted_by',
      'scaler_spawning_agents.registered_at',
      'scaler_spawning_agents.spawned_at',
      'scaler_spawning_agents.label_set',
      'scaler_spawning_agents.provisioning_targets',
      'jobs.state as job_state',
    ])
    .where(PEER_ADOPTABLE_ROW)
    .execute();
  const rows: ReapRowFull[] = raw.map((r) => ({
    agentId: r.agent_id,
    scalerName: r.scaler_name,
    ownerInstanceId: r.owner_instance_id,
    adoptedBy: r.adopted_by,
    registered: r.registered_at !== null,
    ageMs: nowMs - r.spawned_at.getTime(),
    boundJobEnded: r.job_state !== null && TERMINAL_JOB_STATES.includes(r.job_state),
    labelSet: r.label_set,
    provisioningTargets: r.provisioning_targets ?? [],
  }));
  const peers = new Map<string, PeerView>();
  for (const i of await new InstancesRepo(db).list()) {
    if (i.id === selfId) continue;
    peers.set(i.id, {
      alive: i.state === 'alive',
      silentMs: i.state === 'stopped' ? Number.POSITIVE_INFINITY : i.heartbeatAgeMs,
    });
  }
  const seen = new Set(rows.map((r) => r.agentId).filter(connectedHere));
  const visible = [...peers].filter(([, p]) => p.alive).map(([id]) => id);
  const ids = rows.map((r) => r.agentId);
  if (ids.length && visible.length) {
    const connected = await db
      .selectFrom('agents')
      .select('id')
      .where('state', '=', 'connected')
      .where('instance_id', 'in', visible)
      .where('id', 'in', ids)
      .execute();
    for (const a of connected) seen.add(a.id);
  }
  return { rows, peers, seen };
}
