import type Docker from 'dockerode';
import type { ScalerEntry } from '../../../config/index.js';
import { ContainerScalerBackend } from './backend.js';
import type { BackendDescriptor, SweepDeps } from '../descriptor.js';
import type { EngineLocation } from '../deps.js';
import { sweepScalerOrphans } from './orphans.js';
import { containerTools } from './tools.js';

/** The scaler's engine client, from the deps or the composition root's connector; it must answer. */
async function engineFor(
  entry: ScalerEntry,
  deps: Pick<SweepDeps, 'docker' | 'engine' | 'connectEngine'>,
): Promise<{ docker: Docker; engine: EngineLocation | undefined }> {
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
  return { docker, engine };
}

/** How the registry builds a container scaler: the engine client comes from the composition root. */
export const containerDescriptor: BackendDescriptor = {
  type: 'container',
  requiredTools: (entry) => containerTools(entry),
  usesEngine: () => true,
  async create(entry, deps) {
    const { docker, engine } = await engineFor(entry, deps);
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
  /**
   * Nothing is tracked and no registry is asked, so the filter's default (every agent counts as
   * registered) spares every running container: stopped ones of this scaler, and rule sets no agent
   * container holds, are all it removes. No network or table is created.
   */
  async sweeper(entry, deps) {
    const { docker } = await engineFor(entry, deps);
    const isolation = entry.networkIsolation ? deps.isolation : undefined;
    return {
      cleanupOrphans: (isRegistered = () => true, opts) =>
        sweepScalerOrphans(
          {
            docker,
            scalerName: entry.name,
            tracked: new Set(),
            trackedIps: [],
            isRegistered,
            isolation,
            log: deps.logger,
          },
          opts,
        ),
    };
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
