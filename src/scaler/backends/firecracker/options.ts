import type { FirecrackerNetwork, ScalerEntry } from '../../../config/index.js';
import type { AgentIsolation } from '../../../net/isolation.js';
import type { Clock } from '../../../util/clock.js';
import type { Logger } from '../../../util/logger.js';
import type { StatfsFn } from './disk-guard.js';
import type { CommandRunner, HostNet } from './host-net.js';
import type { IpAllocator } from './ip-allocator.js';
import type { VmmDriver } from './vmm.js';

/** What the VM backend is built from; every host tool and the hypervisor are passed in. */
export interface VmBackendOptions {
  entry: ScalerEntry;
  network: FirecrackerNetwork;
  driver: VmmDriver;
  allocator: IpAllocator;
  hostNet: HostNet;
  run: CommandRunner;
  /** nft isolation through the shared port; without it VMs reach whatever the bridge routes to. */
  isolation: AgentIsolation | undefined;
  logger: Logger;
  hostEnv?: NodeJS.ProcessEnv;
  /** Relative paths in the entry resolve here. */
  resolvePath: (p: string) => string;
  /** Before each spawn: free space under the VM directory (injected in tests). */
  disk?: { thresholdBytes: number; statfs: StatfsFn };
  stopGraceMs?: number;
  /** hostAccess entries the orchestrator itself directs agents at (storage host access). */
  hostServices?: string[] | undefined;
  /** Drives the periodic orphan sweep (a manual clock in tests). */
  clock?: Clock;
  sweepIntervalMs?: number;
  /**
   * False when the allocator cannot see every scaler's leases (a sweep with leases in memory, the
   * orchestrator down): a TAP with no lease may then be another scaler's or another orchestrator's
   * live VM's, so the sweep deletes only the TAPs its own dead VMs' records name.
   */
  sweepsUnleasedTaps?: boolean;
}
