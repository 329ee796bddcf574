import { dirname } from 'node:path';
import type { BackendDescriptor } from '../descriptor.js';
import { BareMetalScalerBackend } from './backend.js';
import { detectCgroups } from './cgroups.js';
import { bareMetalTools } from './tools.js';

/** How the registry builds a bare-metal scaler. */
export const bareMetalDescriptor: BackendDescriptor = {
  type: 'bare-metal',
  requiredTools: (entry, deps) => bareMetalTools(entry, dirname(deps.configPath)),
  async create(entry, deps) {
    const cgroups = entry.enforceCgroups ? (deps.cgroups ?? (await detectCgroups())) : undefined;
    if (entry.enforceCgroups && !cgroups) {
      throw new Error(
        `scaler "${entry.name}": enforceCgroups is set but no usable cgroup hierarchy was found under /sys/fs/cgroup`,
      );
    }
    return new BareMetalScalerBackend({
      entry,
      cgroups,
      logger: deps.logger,
      baseDir: dirname(deps.configPath),
      ...(deps.hostEnv ? { hostEnv: deps.hostEnv } : {}),
    });
  },
};
