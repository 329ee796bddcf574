import type Docker from 'dockerode';
import type { ScalerEntry } from '../../../config/index.js';
import type { AgentIsolation } from '../../../net/isolation.js';
import type { Logger } from '../../../util/logger.js';
import type { ContainerRuntime } from '../container-runtime.js';
import type { LabelSetConfig, ResourceRequest } from '../../../config/index.js';
import type { AgentTokenStore } from '../../types.js';
import type { EffectiveLimits, ManagedAgent, SpawnContext } from '../../types.js';
import type { FollowedLogs, LineTail } from './logs.js';

/** One agent container the backend holds. */
export interface Tracked {
  agent: ManagedAgent;
  containerId?: string;
  /** Its address on kici-agent-net, once known (the key of its firewall rules). */
  ip?: string;
  logs?: FollowedLogs;
  /** The log attach under way (it runs beside the rest of the spawn). */
  attaching?: Promise<void>;
  /** The failure path ran: a log stream attached late must close itself. */
  failed?: boolean;
  tail: LineTail;
  registered: boolean;
  destroying: boolean;
  image: string;
  /** The agent image whose runtime volume a job-image spawn mounts (its lookup is forgotten on failure). */
  runtimeOf?: string;
}

/** What a spawn needs from its backend. */
export interface SpawnHost {
  readonly name: string;
  readonly docker: Docker;
  /** The engine as the operator would name it (socket path or host), for error messages. */
  readonly engineWhere: string;
  readonly localSocket: string | undefined;
  readonly hostEnv: NodeJS.ProcessEnv;
  extraHosts(): string[] | undefined;
  /** Limits when neither the spawn nor the label set names any. */
  defaultLimits: EffectiveLimits | undefined;
  readonly isolation: unknown;
  current(agentId: string): Tracked | undefined;
  agentUrl(url: string): string;
  applyRules(req: SpawnContext, ls: LabelSetConfig, ip: string): Promise<void>;
  removeRules(ip: string): Promise<void>;
  onOutput(agentId: string, stream: 'stdout' | 'stderr', line: string): void;
  warn(agentId: string, msg: string): void;
}

export interface ContainerScalerBackendOptions {
  entry: ScalerEntry;
  /**
   * One client for Docker or Podman's compatible API, built by the composition root. Absent: the
   * backend connects itself, by the entry's `host`, `socketPath`, or the first local socket found.
   */
  docker?: Docker | undefined;
  /** Which engine `docker` talks to; `auto` (or absent) tells it from the socket path. */
  runtime?: ContainerRuntime | 'auto' | undefined;
  /** The engine's socket on this host; undefined for a remote engine (`host`). */
  socketPath?: string | undefined;
  /** Absent: nothing is logged. */
  logger?: Logger | undefined;
  /** Limits for agents whose spawn and label set name none. */
  defaultResources?: ResourceRequest | undefined;
  /** `host:address` entries for every agent container, after the entry's own `extraHosts`. */
  extraHosts?: string[] | undefined;
  /** Overrides the entry's `networkIsolation` (nftables confinement of agents; default on). */
  networkIsolation?: boolean | undefined;
  /**
   * Mints the agent token of a positional spawn() (the manager mints its own); absent, such an
   * agent gets no token.
   */
  tokenStore?: AgentTokenStore | undefined;
  /** Lifetime of those tokens in ms (default 1 hour). */
  tokenTtlMs?: number | undefined;
  /** The host firewall for agents on kici-agent-net; required while `networkIsolation` is on. */
  isolation?: AgentIsolation | undefined;
  hostEnv?: NodeJS.ProcessEnv | undefined;
  /** hostAccess entries the orchestrator itself directs agents at (its object store, ...). */
  hostServices?: string[] | undefined;
  /** Grace before a destroyed container is killed (spec: 10 s). */
  stopSeconds?: number | undefined;
}
