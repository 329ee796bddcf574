import { dirname } from 'node:path';
import type { BackendDescriptor } from '../descriptor.js';
import { UserError } from '../../../util/errors.js';
import { BareMetalScalerBackend } from './backend.js';
import { detectCgroups } from './cgroups.js';
import { bareMetalTools } from './tools.js';

/** How the registry builds a bare-metal scaler. */
export const bareMetalDescriptor: BackendDescriptor = {
  type: 'bare-metal',
  requiredTools: (entry, deps) => bareMetalTools(entry, dirname(deps.configPath), deps.hostEnv),
  async create(entry, deps) {
    const cgroups = entry.enforceCgroups ? (deps.cgroups ?? (await detectCgroups())) : undefined;
    // Dropping to another uid and mounting the sandbox both need root; say so before any spawn.
    const needsRoot = entry.labelSets.filter((ls) => ls.runAsUser === 'dynamic');
    if (needsRoot.length && process.getuid?.() !== 0) {
      throw new UserError(
        `scaler "${entry.name}": labelSets[${entry.labelSets.indexOf(needsRoot[0]!)}].runAsUser: dynamic needs the orchestrator to run as root (it switches each agent to its own uid); run as root or remove runAsUser`,
      );
    }
    return new BareMetalScalerBackend({
      entry,
      cgroups,
      logger: deps.logger,
      baseDir: dirname(deps.configPath),
      ...(deps.hostEnv ? { hostEnv: deps.hostEnv } : {}),
      ...(deps.dataDir ? { dataDir: deps.dataDir } : {}),
    });
  },
};
