import type { ScalerEntry, ScalerType } from '../../config/index.js';
import type { RequiredTool, ScalerBackend } from '../types.js';
import type { BackendDeps } from './deps.js';

/**
 * What a backend built without the orchestrator can do: list and remove what stopped or dead agents
 * left on this host, from host-local evidence alone (no store, no agent registry).
 */
export type OrphanSweeper = Required<Pick<ScalerBackend, 'cleanupOrphans'>>;

/** What a sweeper is built from: no store, and nothing that writes outside the host's own leftovers. */
export type SweepDeps = Pick<
  BackendDeps,
  'logger' | 'configPath' | 'hostEnv' | 'vmNetwork' | 'docker' | 'engine' | 'connectEngine' | 'isolation'
>;

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
  /**
   * What `entry` will do on this host that the operator should know but that does not stop it
   * (limits that cannot be enforced here), as `[field, problem, fix]`. `scaler validate` shows them;
   * at start-up the backend says them itself, once.
   */
  hostWarnings?(
    entry: ScalerEntry,
    deps: Pick<BackendDeps, 'configPath' | 'hostEnv' | 'limitsProbes'>,
  ): Promise<[field: string, problem: string, fix: string][]>;
  /**
   * Backends whose leftovers can be told apart on the host alone (a stopped container, a VM
   * directory whose VMM is gone): the sweeper `kici-admin scaler reap-orphans` uses while the
   * orchestrator is down. Absent: that backend's leftovers need the running orchestrator.
   */
  sweeper?(entry: ScalerEntry, deps: SweepDeps): Promise<OrphanSweeper>;
}
