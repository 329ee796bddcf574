/**
 * Orphan sweeps (spec D.1). An earlier version removed every kici-managed container on the host:
 * two orchestrators on one engine then destroyed each other's live agents at every start, and
 * adding a scaler killed the existing one's agents mid-job. Hence every filter below.
 */
import type Docker from 'dockerode';
import { ISOLATED_NETWORK_NAME } from './network.js';
import { LABEL_AGENT, LABEL_MANAGED, LABEL_SCALER } from './labels.js';

export interface OrphanFacts {
  /** Agent ids this backend tracks (spawning, running or being destroyed). */
  tracked: ReadonlySet<string>;
  /** Is this agent registered with this orchestrator? */
  isRegistered(agentId: string): boolean;
}

/** Is this listed container an orphan of ours? Only the scaler's own containers are ever passed. */
export function isOrphan(c: Pick<Docker.ContainerInfo, 'Labels' | 'State'>, facts: OrphanFacts): boolean {
  const agentId = c.Labels?.[LABEL_AGENT];
  if (agentId && facts.tracked.has(agentId)) return false;
  const up =
    c.State === 'running' || c.State === 'restarting' || c.State === 'paused' || c.State === 'created';
  if (!up) return true;
  // Running without an id we could ask about, or with a registered agent: someone's live work.
  if (!agentId) return false;
  return !facts.isRegistered(agentId);
}

export async function listScalerContainers(docker: Docker, scalerName: string, agentId?: string) {
  const label = [`${LABEL_MANAGED}=true`, `${LABEL_SCALER}=${scalerName}`];
  if (agentId) label.push(`${LABEL_AGENT}=${agentId}`);
  return docker.listContainers({ all: true, filters: { label } });
}

/** Stop briefly, then force-remove; errors mean it is already gone or going. */
export async function removeContainer(docker: Docker, id: string, stopSeconds: number): Promise<boolean> {
  const c = docker.getContainer(id);
  if (stopSeconds > 0) await c.stop({ t: stopSeconds }).catch(() => undefined);
  return c.remove({ force: true }).then(
    () => true,
    () => false,
  );
}

/** Addresses on kici-agent-net of every kici-managed container of any scaler or orchestrator. */
export async function liveAgentAddresses(docker: Docker): Promise<Set<string>> {
  const all = await docker.listContainers({ all: true, filters: { label: [`${LABEL_MANAGED}=true`] } });
  const ips = new Set<string>();
  for (const c of all) {
    const ip = c.NetworkSettings?.Networks?.[ISOLATED_NETWORK_NAME]?.IPAddress;
    if (ip) ips.add(ip);
  }
  return ips;
}
