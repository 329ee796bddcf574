/**
 * The container backend's options as an embedding caller may give them (engine client, runtime,
 * logger all optional), resolved to what the backend runs with.
 */
import type Docker from 'dockerode';
import { parseMemoryString, type ResourceRequest } from '../../../config/index.js';
import { silentLogger, type Logger } from '../../../util/logger.js';
import type { EffectiveLimits } from '../../types.js';
import { locateEngine, runtimeOfSocket, type ContainerRuntime } from '../container-runtime.js';
import { dockerFor } from '../engine-client.js';
import type { ContainerScalerBackendOptions } from './tracked.js';

/** Lifetime of a token minted for a positional spawn when the options name none: one hour. */
export const DEFAULT_TOKEN_TTL_MS = 3_600_000;

/** The options with every default filled in: a client, its runtime, a logger, the isolation switch. */
export interface ResolvedOptions extends ContainerScalerBackendOptions {
  docker: Docker;
  runtime: ContainerRuntime;
  logger: Logger;
  isolated: boolean;
}

export async function resolveOptions(o: ContainerScalerBackendOptions): Promise<ResolvedOptions> {
  const logger = o.logger ?? silentLogger();
  const isolated = o.networkIsolation ?? o.entry.networkIsolation;
  if (o.docker) {
    const named = o.runtime === 'docker' || o.runtime === 'podman' ? o.runtime : undefined;
    const runtime = named ?? (o.socketPath ? runtimeOfSocket(o.socketPath) : 'docker');
    return { ...o, docker: o.docker, runtime, logger, isolated };
  }
  const engine = await locateEngine(
    {
      name: o.entry.name,
      host: o.entry.host,
      socketPath: o.socketPath ?? o.entry.socketPath,
      runtime: o.runtime ?? o.entry.runtime,
    },
    { env: o.hostEnv ?? process.env },
  );
  return {
    ...o,
    docker: dockerFor(engine, o.hostEnv ?? process.env),
    runtime: engine.runtime,
    socketPath: engine.local ? engine.socketPath : undefined,
    logger,
    isolated,
  };
}

export function mergeHosts(a: string[] | undefined, b: string[] | undefined): string[] | undefined {
  if (!b?.length) return a;
  return [...new Set([...(a ?? []), ...b])];
}

export function limitsOf(r: ResourceRequest | undefined): EffectiveLimits | undefined {
  const l = r?.limits ?? r?.requests;
  if (!l) return undefined;
  return { cpus: l.cpus ?? 0, memBytes: l.memory ? parseMemoryString(l.memory) : 0 };
}

export type { ContainerScalerBackendOptions } from './tracked.js';
