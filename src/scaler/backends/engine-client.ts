/**
 * Builds the dockerode client of a container scaler. Called by the composition root (never by a
 * backend), which hands the client in through BackendDeps.
 */
import Docker from 'dockerode';
import type { ScalerEntry } from '../../config/index.js';
import { locateEngine, type EngineConnection } from './container-runtime.js';

export interface EngineClient {
  docker: Docker;
  engine: EngineConnection;
}

export function dockerFor(engine: EngineConnection): Docker {
  if (engine.local) return new Docker({ socketPath: engine.socketPath });
  const u = new URL(engine.socketPath);
  const protocol = u.protocol === 'https:' ? 'https' : u.protocol === 'ssh:' ? 'ssh' : 'http';
  return new Docker({
    host: u.hostname,
    port: Number(u.port) || (protocol === 'https' ? 2376 : 2375),
    protocol,
  });
}

export async function connectEngine(
  entry: ScalerEntry,
  env: NodeJS.ProcessEnv = process.env,
): Promise<EngineClient> {
  const engine = await locateEngine(entry, { env });
  return { docker: dockerFor(engine), engine };
}
