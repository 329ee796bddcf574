/**
 * One agent's firewall rules on kici-agent-net: put in place once its container has an address,
 * taken away when it goes. The backend hands these to the spawn through its SpawnHost.
 */
import type { LabelSetConfig } from '../../../config/index.js';
import { IsolationError, type AgentIsolation } from '../../../net/isolation.js';
import type { Logger } from '../../../util/logger.js';
import { SpawnError } from '../../core/spawn-errors.js';
import type { SpawnContext } from '../../types.js';

export interface AgentRulesDeps {
  /** The host firewall; applying rules is only asked for while isolation is on, so it is set then. */
  isolation: AgentIsolation | undefined;
  scalerName: string;
  /** hostAccess entries the orchestrator itself directs agents at. */
  hostServices: string[] | undefined;
  /** The orchestrator URL as a container dials it. */
  agentUrl(url: string): string;
  log: Logger;
}

export async function applyAgentRules(
  deps: AgentRulesDeps,
  req: SpawnContext,
  ls: LabelSetConfig,
  ip: string,
): Promise<void> {
  const url = new URL(deps.agentUrl(req.orchestratorUrl));
  const port = Number(url.port) || (url.protocol === 'wss:' || url.protocol === 'https:' ? 443 : 80);
  try {
    await deps.isolation!.apply({
      agentId: req.agentId,
      scalerName: deps.scalerName,
      ip,
      orchestrator: { address: url.hostname, port },
      hostAccess: deps.hostServices ?? [],
      policy: ls.networkPolicy,
    });
  } catch (err) {
    // Classified, with the fix: a name in orchestratorUrl is a config error, an nft failure may pass.
    if (!(err instanceof IsolationError)) throw err;
    const kind = err.kind === 'config' ? 'config' : 'transient';
    throw new SpawnError(kind, `${err.message}. Fix: ${err.remedy}`, { cause: err });
  }
}

export async function removeAgentRules(deps: AgentRulesDeps, ip: string): Promise<void> {
  await deps.isolation
    ?.remove(ip)
    .catch((err: unknown) => deps.log.warn({ ip, err: String(err) }, 'could not remove firewall rules'));
}
