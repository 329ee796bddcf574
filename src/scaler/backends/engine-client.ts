/**
 * Builds the dockerode client of a container scaler. Called by the composition root (never by a
 * backend), which hands the client in through BackendDeps.
 */
import Docker from 'dockerode';
import type { ScalerEntry } from '../../config/index.js';
import { locateEngine, type EngineConnection } from './container-runtime.js';
import { dockerOptionsFor } from './engine-options.js';

export interface EngineClient {
  docker: Docker;
  engine: EngineConnection;
}

/** The client for `engine`: its socket, or its remote host with TLS as the Docker CLI would use it. */
export function dockerFor(engine: EngineConnection, env: NodeJS.ProcessEnv = process.env): Docker {
  return new Docker(dockerOptionsFor(engine, env));
}

export async function connectEngine(
  entry: ScalerEntry,
  env: NodeJS.ProcessEnv = process.env,
): Promise<EngineClient> {
  const engine = await locateEngine(entry, { env });
  return { docker: dockerFor(engine, env), engine };
}
