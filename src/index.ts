/**
 * The package's public API. The names the seed declares for the scaler module keep their names
 * and meanings here; backends that are not built yet will join this list as they land.
 */
export {
  DEFAULT_MAX_CONCURRENT_SPAWNS,
  networkPolicySchema,
  labelSetConfigSchema,
  firecrackerNetworkSchema,
  scalerFileSchema,
  parseMemoryString,
  loadScalerConfig,
  loadScalerConfigForPeople,
  detectLabelSetOverlaps,
  canonicalizeLabels,
  normalizeLabelSet,
  scalerConfigJsonSchema,
  type ScalerConfig,
  type ScalerEntry,
  type LabelSetConfig,
  type NetworkPolicy,
  type FirecrackerNetwork,
  type ResourceRequest,
  type ResourceCap,
  type ScalerType,
} from './config/index.js';
export { ScalerManager, RegistrationRefused, type ScalerManagerOptions } from './scaler/manager.js';
export type {
  ScalerBackend,
  SpawnRequest,
  SpawnContext,
  AgentAuth,
  BackendCapabilities,
  DestroyReason,
  RequiredTool,
  ManagedAgent,
  ScaleResult,
  ScaleJob,
  ScalerEvent,
  ScalerEventCallback,
  ScalerDestroyContext,
  PositionalSpawnContext,
  EffectiveLimits,
  LogCapture,
  ToolRequirement,
  AgentTokenStore,
  ValidationResult,
} from './scaler/types.js';
export { createScalerBackend, descriptorFor, availableBackendTypes } from './scaler/backends/registry.js';
export {
  runDiskGuard,
  DEFAULT_DISK_GUARD_THRESHOLD_BYTES,
  type DiskGuardResult,
} from './scaler/backends/registry.js';
export type { BackendDeps, NftRunner, VmmDriver } from './scaler/backends/deps.js';
export {
  IsolationError,
  NftAgentIsolation,
  createNftRunner,
  nftRequiredTool,
  probeNft,
  warnIsolationOff,
  type AgentIsolation,
  type AgentRuleRequest,
} from './net/index.js';
export { Orchestrator, type OrchestratorOptions } from './server/orchestrator.js';
export { parseRunSpec, runSpecSchema, type RunSpec, type JobSpec } from './jobs/run-spec.js';
export type * from './protocol/messages.js';
export {
  ContainerScalerBackend,
  type ContainerScalerBackendOptions,
  type DetectedRuntime,
  ISOLATED_NETWORK_GATEWAY,
  ISOLATED_NETWORK_NAME,
  AGENT_CONTAINER_PIDS_LIMIT,
  buildAgentContainerHostConfig,
  buildAgentHostConfig,
  type AgentHostConfigInput,
  detectRuntime,
} from './scaler/backends/public.js';
export {
  canAgentRunJob,
  KICI_RUNTIME_DOCKER_LABEL,
  KICI_RUNTIME_PODMAN_LABEL,
} from './dispatch/agent-registry.js';

export {
  EventScalerBackend,
  ClaimRefused,
  type EventScalerBackendOptions,
} from './scaler/backends/registry.js';
export type {
  ScalerEventEmitterLike,
  ScalerScaleUpPayload,
  ScalerScaleDownPayload,
  ScaleDownReason,
} from './scaler/events/payloads.js';
export { withScalerCapLock, type ScalerCapLock } from './store/scaler-cap-lock.js';
export { StoreClaimStore, type ClaimedCredentials } from './scaler/claim-store.js';
export { signWebhook } from './scaler/events/webhook.js';
