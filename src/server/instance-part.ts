import type { InstancePart } from '../cluster/cluster-view.js';
import type { Dispatcher } from '../dispatch/dispatcher.js';
import type { Clock } from '../util/clock.js';
import { listAgents } from './agent-routes.js';
import { diagnoseScalers } from './scaler-diagnose.js';
import { describeScalerStatus } from './scaler-views.js';

/**
 * This instance's part of the cluster view: what its own `scaler status`, `diagnose` and
 * `agent list` show. Published with the heartbeat so any instance can answer for all of them.
 */
export async function instancePart(
  dispatcher: Dispatcher,
  clock: Clock,
  scalerConfigPath: string | undefined,
): Promise<InstancePart> {
  return {
    scalerStatus: describeScalerStatus(dispatcher, clock),
    diagnose: await diagnoseScalers(dispatcher, clock, scalerConfigPath),
    agents: listAgents(dispatcher, clock),
  };
}
