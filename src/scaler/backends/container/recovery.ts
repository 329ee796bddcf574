/**
 * Containers left from before, found by listing the engine rather than by anything tracked:
 * re-tracking one that survived an orchestrator restart (adopt), and removing those of an agent
 * whose registration the orchestrator refused (reapUnowned).
 */
import type Docker from 'dockerode';
import { errorMessage } from '../../../util/errors.js';
import type { Logger } from '../../../util/logger.js';
import type { ManagedAgent } from '../../types.js';
import { LineTail } from './logs.js';
import { listScalerContainers, removeContainer } from './orphans.js';
import type { TrackedAgents } from './tracked-agents.js';
import type { Tracked } from './tracked.js';

export interface RecoveryDeps {
  docker: Docker;
  scalerName: string;
  /** The backend's own: an adopted container is tracked in it, a tracked agent is never reaped. */
  agents: TrackedAgents;
  log: Logger;
}

export async function reapUnowned(deps: RecoveryDeps, agentId: string): Promise<boolean> {
  if (deps.agents.has(agentId)) return false;
  let found;
  try {
    found = await listScalerContainers(deps.docker, deps.scalerName, agentId);
  } catch (err) {
    deps.log.warn({ agentId, err: String(err) }, 'cannot list containers to reap');
    return false;
  }
  const removed = await Promise.all(found.map((c) => removeContainer(deps.docker, c.Id, 0)));
  return removed.some(Boolean);
}

export async function adoptContainer(
  deps: RecoveryDeps,
  agentId: string,
  labelSet: string[],
  backendRef: string | null,
): Promise<boolean> {
  let found;
  try {
    found = await listScalerContainers(deps.docker, deps.scalerName, agentId);
  } catch (err) {
    // An engine that does not answer says nothing about the container: the caller keeps the record.
    throw new Error(`cannot list containers to adopt ${agentId}: ${errorMessage(err)}`, { cause: err });
  }
  const c = found.find((x) => x.State === 'running' && (!backendRef || x.Id === backendRef));
  if (!c) return false;
  const ip = c.NetworkSettings?.Networks?.['kici-agent-net']?.IPAddress || undefined;
  deps.agents.track(agentId, adoptedContainer(agentId, labelSet, c, ip));
  return true;
}

/**
 * What a backend holds for a running agent container it takes over after a restart: the container
 * backend and bare-metal job-image mode both adopt this way (agent-container-kit.ts).
 */
export function adoptedContainer(
  agentId: string,
  labelSet: string[],
  c: Docker.ContainerInfo,
  ip: string | undefined,
): Tracked {
  const agent: ManagedAgent = {
    id: agentId,
    labelSet,
    backendRef: c.Id,
    spawnedAt: Date.now(),
    state: 'running',
  };
  return {
    agent,
    containerId: c.Id,
    ...(ip ? { ip } : {}),
    tail: new LineTail(),
    registered: false,
    destroying: false,
    image: c.Image,
  };
}
