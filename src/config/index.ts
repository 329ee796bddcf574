/** Public surface of the scaler configuration: schemas, types, loaders and helpers. */
export {
  DEFAULT_AGENT_TOKEN_TTL_SECONDS,
  DEFAULT_CLAIM_TTL_SECONDS,
  DEFAULT_FIRECRACKER_MEM_SIZE_MIB,
  DEFAULT_FIRECRACKER_NETWORK,
  DEFAULT_FIRECRACKER_VCPU_COUNT,
  DEFAULT_GLOBAL_MAX_AGENTS,
  DEFAULT_JAILER_CHROOT_BASE_DIR,
  DEFAULT_MAX_CONCURRENT_SPAWNS,
  DEFAULT_WARM_POOL_IDLE_TIMEOUT_SECONDS,
} from './defaults.js';
export {
  formatBytes,
  isMemoryString,
  MEMORY_PATTERN,
  memoryFormatMessage,
  parseMemoryString,
} from './memory.js';
export {
  canonicalizeLabels,
  foldLabel,
  hasReservedPrefix,
  isPlatformLabelWord,
  normalizeLabelSet,
  normalizeRoles,
  PLATFORM_LABEL_WORDS,
  platformToTaints,
  RESERVED_LABEL_PREFIX,
  SCALER_ARCHES,
  SCALER_OSES,
  SCALER_ROLES,
  type ScalerArch,
  type ScalerOs,
  type ScalerPlatform,
  type ScalerRole,
} from './labels.js';
export {
  isAddressOrCidr,
  isExtraHostEntry,
  parseHostAccessEntry,
  type HostAccessEntry,
} from './addresses.js';
export {
  memoryStringSchema,
  mirrorResources,
  resourceCapSchema,
  resourceRequestSchema,
  resourceSpecSchema,
  type ResourceCap,
  type ResourceRequest,
  type ResourceSpec,
} from './resources.js';
export { labelSchema } from './label-set-schema.js';
export {
  createScalerEntrySchema,
  isProvisioningTarget,
  platformSchema,
  warmPoolSchema,
} from './entry-schema.js';
export { checkScalerEntryRules, isUnsafeBatchPath, type RuleIssue } from './entry-rules.js';
export {
  createScalerFileSchema,
  firecrackerNetworkSchema,
  labelSetConfigSchema,
  machinePoolSchema,
  networkPolicySchema,
  SCALER_TYPES,
  scalerFileSchema,
  type FirecrackerNetwork,
  type LabelSetConfig,
  type MachinePool,
  type NetworkPolicy,
  type ScalerConfig,
  type ScalerConfigInput,
  type ScalerEntry,
  type ScalerFileSchemaOptions,
  type ScalerType,
  type WarmPoolConfig,
} from './schema.js';
export { friendlyIssueMessage, SCALER_PARSE_PARAMS } from './messages.js';
export { loadScalerConfig, readConfigSources } from './loader.js';
export type { ConfigSources, ScalerOrigin, SourceFile } from './provenance.js';
export {
  formatConfigError,
  formatYamlPath,
  isConfigInputError,
  type ConfigErrorContext,
} from './format-errors.js';
export {
  detectLabelSetOverlaps,
  findDuplicateScalerNames,
  findLabelSetOverlaps,
  formatLabelSetOverlap,
  type DuplicateScalerName,
  type LabelSetOverlap,
  type LocatedLabelSetOverlap,
} from './overlaps.js';
export { collectConfigWarnings } from './warnings.js';
export { warmSkipReason } from './warm-eligibility.js';
export {
  crossScalerProblems,
  loadScalerConfigForPeople,
  type PeopleLoadOptions,
  type PeopleLoadResult,
} from './people.js';
export { SCALER_CONFIG_SCHEMA_ID, scalerConfigJsonSchema } from './json-schema.js';
export {
  formatCap,
  formatSummary,
  summarizeConfig,
  type ConfigSummary,
  type ScalerSummary,
} from './summary.js';
