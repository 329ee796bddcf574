/** Host network confinement for bridge-attached agents (container, job-image, micro-VM backends). */
export {
  IsolationError,
  type AgentIsolation,
  type AgentNetworkPolicy,
  type AgentRuleRequest,
} from './isolation.js';
export {
  createNftRunner,
  isNftMissing,
  NftError,
  type NftCommand,
  type NftObject,
  type NftRunner,
  type NftRunnerOptions,
} from './nft-runner.js';
export { BLOCKED_RANGES, resolveHostAccess, type NftTableSpec } from './nft-rules.js';
export {
  DEFAULT_AGENT_TABLE,
  NFT_REMEDY,
  NftAgentIsolation,
  type GuardResult,
  type NftIsolationOptions,
} from './nft-isolation.js';
export { nftRequiredTool, probeNft, warnIsolationOff } from './nft-preflight.js';
