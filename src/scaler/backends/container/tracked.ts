import type Docker from 'dockerode';
import type { LabelSetConfig } from '../../../config/index.js';
import type { ManagedAgent, SpawnContext } from '../../types.js';
import type { FollowedLogs, LineTail } from './logs.js';

/** One agent container the backend holds. */
export interface Tracked {
  agent: ManagedAgent;
  containerId?: string;
  /** Its address on kici-agent-net, once known (the key of its firewall rules). */
  ip?: string;
  logs?: FollowedLogs;
  tail: LineTail;
  registered: boolean;
  destroying: boolean;
  image: string;
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
  readonly isolation: unknown;
  current(agentId: string): Tracked | undefined;
  agentUrl(url: string): string;
  applyRules(req: SpawnContext, ls: LabelSetConfig, ip: string): Promise<void>;
  removeRules(ip: string): Promise<void>;
  onOutput(agentId: string, stream: 'stdout' | 'stderr', line: string): void;
  warn(agentId: string, msg: string): void;
}
