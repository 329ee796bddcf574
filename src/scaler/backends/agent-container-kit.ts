/**
 * The agent-container spawn path as a shared kit: the container backend and bare-metal job-image
 * mode both start agent containers, and job-image mode must behave exactly like the container
 * backend (HostConfig builder, kici-agent-net, runtime injection, labels, per-IP firewall rules).
 * Backend folders may not import each other, so the one implementation (in container/) is named
 * here, at the top of backends/, for both. Moving the files themselves up is a later tidy-up.
 */
export { failSpawn, runSpawn } from './container/spawn.js';
export type { SpawnHost, Tracked as AgentContainer } from './container/tracked.js';
export { LineTail } from './container/logs.js';
export {
  ensureIsolatedNetwork,
  ISOLATED_NETWORK_GATEWAY,
  ISOLATED_NETWORK_NAME,
  urlForContainer,
} from './container/network.js';
export { LABEL_AGENT, LABEL_MANAGED, LABEL_SCALER } from './container/labels.js';
export { listScalerContainers, removeContainer } from './container/orphans.js';
export { adoptedContainer } from './container/recovery.js';
