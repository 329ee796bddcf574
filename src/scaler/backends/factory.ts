import { dirname } from 'node:path';
import type { ScalerEntry } from '../../config/index.js';
import type { Logger } from '../../util/logger.js';
import type { ScalerBackend } from '../types.js';
import { BareMetalScalerBackend } from './bare-metal/backend.js';
import { detectCgroups, type CgroupDriver } from './bare-metal/cgroups.js';

export interface BackendFactoryContext {
  logger: Logger;
  /** The main config file; relative paths in entries resolve against its directory. */
  configPath: string;
  hostEnv?: NodeJS.ProcessEnv;
  cgroups?: CgroupDriver;
}

export class UnsupportedBackendError extends Error {}

/** One factory for start-up and reload, so a reloaded scaler is built exactly like a booted one. */
export async function createScalerBackend(
  entry: ScalerEntry,
  ctx: BackendFactoryContext,
): Promise<ScalerBackend> {
  switch (entry.type) {
    case 'bare-metal': {
      let cgroups: CgroupDriver | undefined;
      if (entry.enforceCgroups) {
        cgroups = ctx.cgroups ?? (await detectCgroups());
        if (!cgroups) {
          throw new UnsupportedBackendError(
            `scaler "${entry.name}": enforceCgroups is set but no usable cgroup hierarchy was found under /sys/fs/cgroup`,
          );
        }
      }
      return new BareMetalScalerBackend({
        entry,
        cgroups,
        logger: ctx.logger,
        baseDir: dirname(ctx.configPath),
        ...(ctx.hostEnv ? { hostEnv: ctx.hostEnv } : {}),
      });
    }
    default:
      throw new UnsupportedBackendError(
        `scaler "${entry.name}": the ${entry.type} backend is not available in this build yet`,
      );
  }
}
