import { randomUUID } from 'node:crypto';
import { ClaimsRepo } from '../store/claims-repo.js';
import type { Logger } from '../util/logger.js';
import { isPending } from './agent-lifecycle.js';
import type { ScalerManager } from './manager.js';
import type { ReapReason } from './reap-decide.js';
import type { ReapRowFull } from './reap-view.js';

/**
 * Carry out one condemned provision: exactly one scale-down, then every record of it goes. A
 * provision this instance still tracks goes through the manager (which also frees the cap and, for a
 * spawn that timed out, gives the job back); anyone else's is sent to the targets recorded at spawn.
 * Throws when the scale-down could not be sent: the records stay, and the throttle says when the
 * reaper may try again.
 */
export async function tearDownReaped(
  mgr: ScalerManager,
  selfId: string,
  row: ReapRowFull,
  reason: ReapReason,
  spawnTimeoutMs: number,
  log: Logger,
): Promise<void> {
  const m = mgr.state.agents.get(row.agentId);
  if (m && m.scalerName === row.scalerName && (row.ownerInstanceId === selfId || row.adoptedBy === selfId)) {
    if (reason === 'spawn-timeout' && isPending(m.phase)) {
      const seconds = Math.round(spawnTimeoutMs / 1000);
      await mgr.failSpawn(m, {
        kind: 'spawn-timeout',
        message: `the provisioned instance's agent ${row.agentId} did not register within ${seconds}s`,
        deterministic: false,
      });
      return;
    }
    m.abort.abort(new Error(`reaped: ${reason}`));
    await mgr.teardown(m, reason);
    return;
  }
  const backend = mgr.state.backends.get(row.scalerName);
  if (backend?.capabilities.peerAdoptable && backend.adopt) {
    // Adopt it so destroy emits (to the targets recorded at spawn), then drop its records.
    await backend.adopt(row.agentId, row.labelSet, row.agentId);
    await backend.destroy(row.agentId, {
      reason,
      ...(row.provisioningTargets.length ? { targets: row.provisioningTargets } : {}),
    });
  } else {
    const emitter = mgr.opts.scaleEvents;
    if (!emitter || !row.provisioningTargets.length)
      throw new Error(
        `no event scaler "${row.scalerName}" here and no targets recorded for its scale-down; configure the scaler on every orchestrator`,
      );
    await emitter.emitScalerScaleDown(
      { scalerName: row.scalerName, agentId: row.agentId, reason, requestId: randomUUID() },
      row.provisioningTargets,
    );
    await new ClaimsRepo(mgr.opts.store.db)
      .invalidate(row.agentId)
      .catch(() => log.warn({ agentId: row.agentId }, 'could not invalidate the claim code; it expires'));
  }
  const now = new Date(mgr.opts.clock.now());
  // The gone holder's agent must not come back on its old token.
  await mgr.opts.store.tokens
    .revokeForAgent(row.agentId, now)
    .catch(() => log.warn({ agentId: row.agentId }, 'could not revoke the agent token; it expires'));
  await mgr.opts.store.spawns.deleteAgent(row.agentId);
}
