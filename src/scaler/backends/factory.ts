import { dirname } from 'node:path';
import type { ScalerEntry } from '../../config/index.js';
import type { Logger } from '../../util/logger.js';
import type { ScalerBackend } from '../types.js';
import { BareMetalScalerBackend } from './bare-metal/backend.js';

export interface BackendFactoryContext {
  logger: Logger;
  /** The main config file; relative paths in entries resolve against its directory. */
  configPath: string;
  hostEnv?: NodeJS.ProcessEnv;
}

export class UnsupportedBackendError extends Error {}

/** One factory for start-up and reload, so a reloaded scaler is built exactly like a booted one. */
export async function createScalerBackend(entry: ScalerEntry, ctx: BackendFactoryContext): Promise<ScalerBackend> {
  switch (entry.type) {
    case 'bare-metal':
      return new BareMetalScalerBackend({
        entry,
        logger: ctx.logger,
        baseDir: dirname(ctx.configPath),
        ...(ctx.hostEnv ? { hostEnv: ctx.hostEnv } : {}),
      });
    default:
      throw new UnsupportedBackendError(
        `scaler "${entry.name}": the ${entry.type} backend is not available in this build yet`,
      );
  }
}
