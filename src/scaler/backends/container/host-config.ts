/** The shared agent-container HostConfig builder, under the name the container backend owns it by. */
export {
  AGENT_CONTAINER_PIDS_LIMIT,
  buildAgentContainerHostConfig,
  buildAgentHostConfig,
  type AgentHostConfigInput,
} from '../agent-container-host.js';
