/**
 * The container backend names the package's main entry declares (seed container-backend.d.ts,
 * container-hostconfig.d.ts). Re-exported here because code outside backends/ may not import a
 * backend folder; the orchestrator itself still builds backends only through the registry.
 */
export {
  ContainerScalerBackend,
  type ContainerScalerBackendOptions,
  ISOLATED_NETWORK_GATEWAY,
  ISOLATED_NETWORK_NAME,
} from './container/index.js';
export {
  AGENT_CONTAINER_PIDS_LIMIT,
  buildAgentContainerHostConfig,
  buildAgentHostConfig,
  type AgentHostConfigInput,
} from './agent-container-host.js';
export { detectRuntime, type DetectedRuntime } from './container-runtime.js';
