import type { Kysely } from 'kysely';
import type { Database } from '../store/schema.js';
import type { Clock } from '../util/clock.js';
import type { Logger } from '../util/logger.js';
import type { ScalerManager } from './manager.js';

/** What the per-instance half of the event reaper reads and tells. */
export interface ReapedByPeerDeps {
  db: Kysely<Database>;
  manager: ScalerManager;
  instanceId: string;
  clock: Clock;
  /** An entry still pending after this long is stale. */
  spawnTimeoutMs: number;
  log: Logger;
}

/**
 * Our stale pending entries of peer-adoptable backends. Adopted by a peer (the row, or its
 * outcome once the row is gone, says so): forget it quietly, the adopter owns its teardown. Record
 * removed by the lease holder and never adopted: give the job back as a failed provision, emit
 * nothing. Every instance runs this, leader or not: only the instance that holds an entry can drop
 * it from its books.
 */
export async function withdrawReapedByPeer(d: ReapedByPeerDeps): Promise<void> {
  const mgr = d.manager;
  const limit = d.clock.now() - d.spawnTimeoutMs;
  const backend = (m: { scalerName: string }) => mgr.state.backends.get(m.scalerName);
  const stale = mgr
    .entries()
    .filter((m) => backend(m)?.capabilities.peerAdoptable && m.phase === 'starting' && m.createdAtMs < limit);
  if (!stale.length) return;
  const ids = stale.map((m) => m.agentId);
  const adopters = await mgr.adoption.adopters(ids);
  const present = new Set(
    (
      await d.db
        .selectFrom('scaler_spawning_agents')
        .select('agent_id')
        .where('agent_id', 'in', ids)
        .execute()
    ).map((r) => r.agent_id),
  );
  for (const m of stale) {
    const adopter = adopters.get(m.agentId);
    if (adopter && adopter !== d.instanceId) {
      if (mgr.state.agents.get(m.agentId) !== m) continue;
      backend(m)?.forget?.(m.agentId);
      mgr.forget(m);
      d.log.info({ agentId: m.agentId, adoptedBy: adopter }, 'provision adopted by a peer; forgotten here');
      mgr.notifyCapacityFreed();
      continue;
    }
    if (present.has(m.agentId)) continue;
    backend(m)?.forget?.(m.agentId);
    await mgr.failSpawn(m, {
      kind: 'spawn-timeout',
      message: `the provisioned instance's agent ${m.agentId} did not register in time (reaped by the lease holder)`,
      deterministic: false,
    });
  }
}
