/**
 * Orphan sweeps: containers of this scaler whose agent is neither tracked nor registered. An
 * earlier version removed every kici-managed container on the host: two orchestrators on one engine
 * then destroyed each other's live agents at every start, and adding a scaler killed the existing
 * one's agents mid-job. Hence every filter below.
 */
import type Docker from 'dockerode';
import type { AgentIsolation } from '../../../net/isolation.js';
import type { Logger } from '../../../util/logger.js';
import type { CleanupOrphansOptions } from '../../types.js';
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
  // A container only created runs nothing (see inventory.ts): a leftover, like an exited one. One
  // this backend is starting right now is tracked, so it never gets here.
  const up = c.State === 'running' || c.State === 'restarting' || c.State === 'paused';
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
  // A container that will not stop is force-removed next, which is what counts.
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

export interface SweepInput {
  docker: Docker;
  scalerName: string;
  tracked: ReadonlySet<string>;
  /** Addresses of agents this backend tracks (their rules stay even if a listing misses them). */
  trackedIps: readonly string[];
  isRegistered(agentId: string): boolean;
  /** Set only while isolation is on: then stale rule sets are reaped too. */
  isolation: AgentIsolation | undefined;
  log: Logger;
}

/**
 * cleanupOrphans: this scaler's orphaned containers, then rule sets no live container owns. With
 * `dryRun` nothing is removed; each item is reported to `onItem` (the reap-orphans command).
 */
export async function sweepScalerOrphans(i: SweepInput, opts: CleanupOrphansOptions = {}): Promise<number> {
  const mine = await listScalerContainers(i.docker, i.scalerName);
  const orphans = mine.filter((c) => isOrphan(c, { tracked: i.tracked, isRegistered: i.isRegistered }));
  for (const c of orphans)
    opts.onItem?.({
      agentId: c.Labels?.[LABEL_AGENT] ?? null,
      ref: c.Id,
      reason: `container ${c.State}, agent not tracked${c.State === 'running' ? ' and not registered here' : ''}`,
    });
  let n = orphans.length;
  if (!opts.dryRun) {
    const removed = await Promise.all(orphans.map((c) => removeContainer(i.docker, c.Id, 5)));
    n = removed.filter(Boolean).length;
    if (n) i.log.info({ removed: n }, 'removed orphaned agent containers');
  }
  if (!i.isolation) return n;
  let live: Set<string>;
  try {
    live = await liveAgentAddresses(i.docker);
  } catch (err) {
    // Without the full picture any rule might be a live agent's: keep them all.
    i.log.warn({ err: String(err) }, 'cannot list agent containers; keeping every firewall rule');
    return n;
  }
  for (const ip of i.trackedIps) live.add(ip);
  // Only the agents' own subnet: rule sets of other bridges (micro-VMs) are not ours to judge.
  const stale = (await i.isolation.listRuled()).filter((ip) => ip.startsWith('172.30.') && !live.has(ip));
  for (const ip of stale)
    opts.onItem?.({
      agentId: null,
      ref: ip,
      reason: 'firewall rules for an address no agent container holds',
    });
  n += opts.dryRun ? stale.length : await i.isolation.reapStale(live);
  return n;
}
