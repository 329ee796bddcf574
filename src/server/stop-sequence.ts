import { CloseCodes } from '../protocol/messages.js';
import type { ScalerAuditor } from '../scaler/audit/auditor.js';
import type { EventProvisionReaper } from '../scaler/event-reaper.js';
import type { ScaleEventRouter } from '../scaler/events/router.js';
import type { OpenedDatabase } from '../store/index.js';
import type { Logger } from '../util/logger.js';
import { settleJobsAtStop } from './drain.js';
import type { OrchestratorParts } from './orchestrator-parts.js';

/** What a stop winds down: the orchestrator's parts and what its start added to them. */
export interface StopTargets {
  parts: OrchestratorParts;
  database: OpenedDatabase;
  log: Logger;
  timers: { cancel(): void } | undefined;
  auditor: ScalerAuditor | undefined;
  reaper: EventProvisionReaper | undefined;
  scaleEvents: ScaleEventRouter | undefined;
}

/**
 * The stop order, once the orchestrator counts as stopping: timers and background work first, then
 * the dispatcher, the active jobs settled or kept (`agents`), the scaler's agents, the agents'
 * sockets, the scale-event router, the listeners and the cluster, and the store last.
 */
export async function stopInOrder(t: StopTargets, agents: 'teardown' | 'leave'): Promise<void> {
  const { parts, log } = t;
  const { dispatcher } = parts;
  t.timers?.cancel();
  t.auditor?.stop();
  await parts.upkeep.stop();
  parts.cluster.stopSettings();
  await t.reaper?.stop();
  await dispatcher.stop();
  // Jobs that were handed out but never started go back to the queue; started ones cannot be resumed.
  const kept = await settleJobsAtStop(dispatcher, parts.store, agents, log);
  const mode = agents === 'leave' ? 'drain' : 'shutdown';
  await parts.scaler?.shutdownAll(undefined, kept.size > 0 ? kept : undefined, mode);
  for (const a of dispatcher.registry.list()) a.close(CloseCodes.shuttingDown, 'orchestrator shutting down');
  await t.scaleEvents?.close();
  await parts.net.close();
  await parts.cluster.stop();
  await t.database.close();
  log.info({ agentsLeftRunning: kept.size }, 'kici-orchestrator stopped');
}
