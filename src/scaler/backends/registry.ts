import type { ScalerEntry, ScalerType } from '../../config/index.js';
import { errorMessage, UserError } from '../../util/errors.js';
import { describeToolProblem, fatalToolError, preflightTools, type ToolProblem } from '../preflight.js';
import type { ScalerBackend } from '../types.js';
import { bareMetalDescriptor } from './bare-metal/index.js';
import { containerDescriptor } from './container/index.js';
import { vmDescriptor } from './firecracker/index.js';
import type { BackendDeps } from './deps.js';
import { eventDescriptor } from './event/index.js';
import type { BackendDescriptor } from './descriptor.js';

/** The only place that knows which backends this build has. */
const DESCRIPTORS: ReadonlyMap<ScalerType, BackendDescriptor> = new Map([
  [bareMetalDescriptor.type, bareMetalDescriptor],
  [containerDescriptor.type, containerDescriptor],
  [eventDescriptor.type, eventDescriptor],
  [vmDescriptor.type, vmDescriptor],
]);

/** Spec E: the start-up disk guard for VM hosts (exported from the package entry). */
export { runDiskGuard, type DiskGuardResult } from './firecracker/index.js';
export { DEFAULT_DISK_GUARD_THRESHOLD_BYTES, freeBytes, type StatfsFn } from './firecracker/disk-guard.js';
export { vmBridgeExists } from './firecracker/index.js';
export {
  checkNetwork,
  hostTools,
  networkDiagnoseRow,
  provisionHost,
  teardownHost,
  verifyHost,
  type HostPorts,
  type HostRow,
  type ProvisionRecord,
  type VmHostNeeds,
} from './firecracker/host-setup.js';

export class UnsupportedBackendError extends UserError {}

export function descriptorFor(entry: Pick<ScalerEntry, 'name' | 'type'>): BackendDescriptor {
  const d = DESCRIPTORS.get(entry.type);
  if (!d)
    throw new UnsupportedBackendError(
      `scaler "${entry.name}": the ${entry.type} backend is not available in this build yet`,
    );
  return d;
}

export function availableBackendTypes(): ScalerType[] {
  return [...DESCRIPTORS.keys()];
}

/** Check `entry`'s host tools before it is built; every problem, fatal or not, is returned. */
export function preflightEntry(
  entry: ScalerEntry,
  deps: Pick<BackendDeps, 'configPath' | 'hostEnv'>,
  descriptor: BackendDescriptor = descriptorFor(entry),
): Promise<ToolProblem[]> {
  return preflightTools(entry, descriptor.requiredTools(entry, deps), deps.hostEnv ?? process.env);
}

/** Does `entry` need a container engine that answers (containers, job-image label sets)? */
export function usesContainerEngine(entry: ScalerEntry): boolean {
  return descriptorFor(entry).usesEngine?.(entry) ?? false;
}

/** What create() would refuse about `entry` on this host, beyond its tools. */
export function entryHostProblems(
  entry: ScalerEntry,
  deps: Pick<BackendDeps, 'configPath' | 'hostEnv'>,
): [field: string, problem: string, fix: string][] {
  return descriptorFor(entry).hostProblems?.(entry, deps) ?? [];
}

/** Build one backend from the registry, the same way at start-up and on reload. */
export function createScalerBackend(entry: ScalerEntry, deps: BackendDeps): Promise<ScalerBackend> {
  return buildBackend(descriptorFor(entry), entry, deps);
}

/**
 * Preflight, then create. A missing fatal tool throws a UserError naming the scaler, the tool and
 * the fix (start-up stops; a reload adding the scaler is refused); spawn-severity problems are
 * logged and left to fail each spawn with a classified reason.
 */
export async function buildBackend(
  descriptor: BackendDescriptor,
  entry: ScalerEntry,
  deps: BackendDeps,
): Promise<ScalerBackend> {
  const problems = await preflightEntry(entry, deps, descriptor);
  const fatal = fatalToolError(problems);
  if (fatal) throw fatal;
  for (const p of problems) deps.logger.warn({ scaler: p.scaler, tool: p.tool }, describeToolProblem(p));
  try {
    return await descriptor.create(entry, deps);
  } catch (err) {
    if (err instanceof UserError) throw err;
    throw new UserError(errorMessage(err));
  }
}

/** Backend classes the package exports by name (the seed declares them public). */
export { EventScalerBackend, ClaimRefused, type EventScalerBackendOptions } from './event/index.js';
