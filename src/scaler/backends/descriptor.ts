import type { ScalerEntry, ScalerType } from '../../config/index.js';
import type { RequiredTool, ScalerBackend } from '../types.js';
import type { BackendDeps } from './deps.js';

/** What each backend folder exports for the registry: nothing else of it is visible outside. */
export interface BackendDescriptor {
  type: ScalerType;
  /** Host tools `entry` needs; known before the backend is built, so a reload can refuse early. */
  requiredTools(entry: ScalerEntry, deps: Pick<BackendDeps, 'configPath' | 'hostEnv'>): RequiredTool[];
  create(entry: ScalerEntry, deps: BackendDeps): Promise<ScalerBackend>;
  /** Does `entry` need a container engine that answers before it can be built? */
  usesEngine?(entry: ScalerEntry): boolean;
  /** Problems of `entry` on this host that create() would refuse, as `[field, problem, fix]`. */
  hostProblems?(
    entry: ScalerEntry,
    deps: Pick<BackendDeps, 'configPath' | 'hostEnv'>,
  ): [field: string, problem: string, fix: string][];
}
