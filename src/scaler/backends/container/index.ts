import { ContainerScalerBackend } from './backend.js';
import type { BackendDescriptor } from '../descriptor.js';
import { containerTools } from './tools.js';

/** How the registry builds a container scaler: the engine client comes from the composition root. */
export const containerDescriptor: BackendDescriptor = {
  type: 'container',
  requiredTools: (entry) => containerTools(entry),
  usesEngine: () => true,
  async create(entry, deps) {
    let docker = deps.docker;
    let engine = deps.engine;
    if (!docker) {
      if (!deps.connectEngine)
        throw new Error(`scaler "${entry.name}": no container engine client was provided`);
      ({ docker, engine } = await deps.connectEngine(entry));
    }
    const where = engine?.socketPath ?? entry.socketPath ?? entry.host ?? 'the detected socket';
    await docker.ping().catch((err: unknown) => {
      throw new Error(
        `scaler "${entry.name}": the container engine at ${where} does not answer (${(err as Error).message}); start Docker or Podman, or fix socketPath/host`,
      );
    });
    return ContainerScalerBackend.create({
      entry,
      docker,
      runtime: engine?.runtime ?? (entry.runtime === 'podman' ? 'podman' : 'docker'),
      socketPath: engine?.local === false ? undefined : engine?.socketPath,
      logger: deps.logger,
      isolation: deps.isolation,
      hostEnv: deps.hostEnv,
      hostServices: deps.hostServices,
    });
  },
};

export { ContainerScalerBackend, type ContainerScalerBackendOptions } from './backend.js';
export {
  AGENT_CONTAINER_PIDS_LIMIT,
  buildAgentContainerHostConfig,
  buildAgentHostConfig,
} from './host-config.js';
export { ISOLATED_NETWORK_GATEWAY, ISOLATED_NETWORK_NAME } from './network.js';
export type { DetectedRuntime } from './runtime.js';
