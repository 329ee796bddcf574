/** What a container scaler really has on its engine, for the scaler audit. */
import type Docker from 'dockerode';
import type { AgentIsolation } from '../../../net/isolation.js';
import type { InventoryItem } from '../../types.js';
import { ISOLATED_NETWORK_NAME } from './network.js';
import { LABEL_AGENT } from './labels.js';
import { listScalerContainers, liveAgentAddresses } from './orphans.js';

/**
 * States with a process that may be doing work. A container only created (a spawn cut off between
 * create and start, e.g. by an engine outage; Podman's "configured" too) runs nothing, so it is
 * counted stopped and removed as a leftover like an exited one.
 */
const UP = new Set(['running', 'restarting', 'paused', 'stopping']);

/**
 * Containers of `scalerName` (those no longer up marked stopped), then rule sets: one whose address is a container of this
 * scaler belongs to its agent, one whose address no kici container holds belongs to no one (another
 * scaler's live address is left out: it is that scaler's to account for).
 */
export async function containerInventory(
  docker: Docker,
  scalerName: string,
  isolation: AgentIsolation | undefined,
): Promise<InventoryItem[]> {
  const mine = await listScalerContainers(docker, scalerName);
  const items: InventoryItem[] = [];
  const byIp = new Map<string, string | null>();
  for (const c of mine) {
    const agentId = c.Labels?.[LABEL_AGENT] ?? null;
    if (!UP.has(c.State)) {
      items.push({ kind: 'container', agentId, ref: c.Id, stopped: true });
      continue;
    }
    items.push({ kind: 'container', agentId, ref: c.Id });
    const ip = c.NetworkSettings?.Networks?.[ISOLATED_NETWORK_NAME]?.IPAddress;
    if (ip) byIp.set(ip, agentId);
  }
  if (isolation) {
    const anyScaler = await liveAgentAddresses(docker);
    for (const ip of await isolation.listRuled()) {
      if (byIp.has(ip)) items.push({ kind: 'rules', agentId: byIp.get(ip) ?? null, ref: ip });
      else if (!anyScaler.has(ip)) items.push({ kind: 'rules', agentId: null, ref: ip });
    }
  }
  return items;
}
