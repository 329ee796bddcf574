import { logCaptureOf } from '../log-capture.js';
import { logAgentLine } from '../../../util/agent-output.js';
import type Docker from 'dockerode';
import { normalizeLabelSet, type LabelSetConfig, type ScalerEntry } from '../../../config/index.js';
import type { AgentIsolation } from '../../../net/isolation.js';
import type { Logger } from '../../../util/logger.js';
import { UserError } from '../../../util/errors.js';
import type { LogCapture, ManagedAgent, SpawnContext } from '../../types.js';
import {
  adoptedContainer,
  ensureIsolatedNetwork,
  failSpawn,
  ISOLATED_NETWORK_GATEWAY,
  LineTail,
  listScalerContainers,
  removeContainer,
  runSpawn,
  urlForContainer,
  type AgentContainer,
  type SpawnHost,
} from '../agent-container-kit.js';

/** Job-image mode: a label set with `image` and no `binaryPath`. */
export function isJobImageSet(ls: LabelSetConfig): boolean {
  return ls.image !== undefined && ls.binaryPath === undefined;
}

const BOTH_FIXES =
  'run the orchestrator as root (or with CAP_NET_ADMIN), or set requireSudo: true with a NOPASSWD sudoers entry for nft';

export interface JobImageDeps {
  docker: Docker;
  /** The engine's socket on this host (for label sets with containerSocket). */
  socketPath: string | undefined;
  isolation: AgentIsolation | undefined;
  hostServices?: string[] | undefined;
}

/**
 * Checks at create(): job-image agents are confined by host nft rules per container address, so a
 * rootless engine (its traffic never crosses the host's bridge) and an unusable nft are refused.
 * Process-only scalers never get here.
 */
export async function checkJobImageHost(entry: ScalerEntry, deps: JobImageDeps): Promise<void> {
  const info = (await deps.docker.info()) as { SecurityOptions?: string[] };
  if ((info.SecurityOptions ?? []).some((o) => o.includes('name=rootless'))) {
    throw new UserError(
      `scaler "${entry.name}": job-image label sets need a rootful container runtime; this one is rootless, so host nft rules would not see its agents' traffic. Fix: use a rootful Docker or Podman, and ${BOTH_FIXES}`,
    );
  }
  if (!deps.isolation) {
    throw new UserError(
      `scaler "${entry.name}": job-image label sets need nftables to confine their agents, and none is available. Fix: install nftables and ${BOTH_FIXES}`,
    );
  }
  try {
    await deps.isolation.listRuled();
  } catch (err) {
    throw new UserError(
      `scaler "${entry.name}": job-image label sets need a usable nft, but it failed: ${(err as Error).message}. Fix: ${BOTH_FIXES}`,
    );
  }
  await ensureIsolatedNetwork(deps.docker);
}

/** The agent containers of one bare-metal scaler's job-image label sets. */
export class JobImageAgents {
  private readonly agents = new Map<string, AgentContainer>();
  private readonly host: SpawnHost;
  /** Where these containers reach the host: their bridge's gateway, when the engine runs here. */
  readonly agentGateway: string | undefined;

  constructor(
    private readonly name: string,
    private readonly deps: JobImageDeps,
    private readonly log: Logger,
    hostEnv: NodeJS.ProcessEnv,
    extraHosts: () => string[] | undefined,
  ) {
    this.agentGateway = deps.socketPath !== undefined ? ISOLATED_NETWORK_GATEWAY : undefined;
    this.host = {
      name,
      docker: deps.docker,
      engineWhere: deps.socketPath ?? 'the container engine',
      localSocket: deps.socketPath,
      defaultLimits: undefined,
      hostEnv,
      extraHosts,
      isolation: deps.isolation,
      current: (id) => this.agents.get(id),
      agentUrl: (url) => urlForContainer(url, ISOLATED_NETWORK_GATEWAY),
      applyRules: (req, ls, ip) => this.applyRules(req, ls, ip),
      removeRules: (ip) => this.removeRules(ip),
      onOutput: (agentId, stream, line) =>
        logAgentLine(this.log, { agentId, stream, logsSource: 'bare-metal' }, line),
      warn: (agentId, msg) => this.log.warn({ agentId }, msg),
    };
  }

  get size(): number {
    return this.agents.size;
  }

  has(agentId: string): boolean {
    return this.agents.has(agentId);
  }

  async spawn(req: SpawnContext, ls: LabelSetConfig, agent: ManagedAgent): Promise<ManagedAgent> {
    const t: AgentContainer = {
      agent,
      tail: new LineTail(),
      registered: false,
      destroying: false,
      image: req.image ?? ls.image!,
    };
    this.agents.set(req.agentId, t);
    req.onEvent('scaler.provisioning', `starting the agent in ${t.image} (job-image mode)`);
    try {
      await runSpawn(this.host, req, ls, t);
    } catch (err) {
      const failure = await failSpawn(this.host, req, t, err);
      if (this.agents.get(req.agentId) === t) this.agents.delete(req.agentId);
      throw failure;
    }
    agent.state = 'running';
    req.onEvent('scaler.ready', `agent container started (${t.containerId!.slice(0, 12)}) on ${t.image}`);
    req.onEvent('agent.connecting', 'waiting for the agent to register');
    return agent;
  }

  markRegistered(agentId: string): void {
    const t = this.agents.get(agentId);
    if (t) t.registered = true;
  }

  logCapture(agentId: string): LogCapture | undefined {
    const t = this.agents.get(agentId);
    return t ? logCaptureOf(t.tail) : undefined;
  }

  containerOf(agentId: string): string | undefined {
    return this.agents.get(agentId)?.containerId;
  }

  async destroy(agentId: string): Promise<void> {
    const t = this.agents.get(agentId);
    if (!t) return;
    t.destroying = true;
    t.agent.state = 'destroying';
    this.agents.delete(agentId);
    if (t.ip) await this.removeRules(t.ip);
    t.logs?.close();
    // Still being created: the spawn sees `destroying` and removes what it made.
    // Stop first, as the container backend does: Podman's force-remove alone can leave it behind.
    if (t.containerId) await removeContainer(this.deps.docker, t.containerId, 10);
  }

  /** After a restart: this scaler's containers labelled with the agent's id, and their rules. */
  async reap(agentId: string): Promise<boolean> {
    const found = await listScalerContainers(this.deps.docker, this.name, agentId);
    for (const c of found) {
      for (const n of Object.values(c.NetworkSettings?.Networks ?? {}))
        if (n.IPAddress) await this.removeRules(n.IPAddress);
      await removeContainer(this.deps.docker, c.Id, 0);
    }
    return found.length > 0;
  }

  /** After a restart: re-track this scaler's running container for the agent, if there is one. */
  async adopt(agentId: string, labelSet: string[]): Promise<boolean> {
    const found = await listScalerContainers(this.deps.docker, this.name, agentId);
    const c = found.find((x) => x.State === 'running');
    if (!c) return false;
    const ip = Object.values(c.NetworkSettings?.Networks ?? {}).find((n) => n.IPAddress)?.IPAddress;
    this.agents.set(agentId, adoptedContainer(agentId, labelSet, c, ip));
    return true;
  }

  private async applyRules(req: SpawnContext, ls: LabelSetConfig, ip: string): Promise<void> {
    const url = new URL(this.host.agentUrl(req.orchestratorUrl));
    const port = Number(url.port) || (url.protocol === 'wss:' ? 443 : 80);
    await this.deps.isolation!.apply({
      agentId: req.agentId,
      scalerName: this.name,
      ip,
      orchestrator: { address: url.hostname, port },
      hostAccess: this.deps.hostServices ?? [],
      policy: ls.networkPolicy,
    });
  }

  private async removeRules(ip: string): Promise<void> {
    await this.deps.isolation
      ?.remove(ip)
      .catch((err: unknown) => this.log.warn({ ip, err: String(err) }, 'could not remove firewall rules'));
  }

  async shutdownAll(): Promise<void> {
    await Promise.allSettled([...this.agents.keys()].map((id) => this.destroy(id)));
  }

  /** For messages: which sets of `entry` are job-image sets. */
  static describe(entry: ScalerEntry): string {
    return entry.labelSets
      .filter(isJobImageSet)
      .map((ls) => `[${normalizeLabelSet(ls.labels)}]`)
      .join(', ');
  }
}
