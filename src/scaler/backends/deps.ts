import type Docker from 'dockerode';
import type { ScalerEntry } from '../../config/index.js';
import type { AgentIsolation } from '../../net/isolation.js';
import type { Store } from '../../store/index.js';
import type { Clock } from '../../util/clock.js';
import type { Logger } from '../../util/logger.js';
import type { FirecrackerNetwork } from '../../config/index.js';
import type { VmmDriver } from './firecracker/vmm.js';
import type { HostFacts } from './bare-metal/confinement.js';
import type { LimitsProbes } from './bare-metal/choose-limits.js';
import type { StatfsFn } from './firecracker/disk-guard.js';
import type { NftRunner } from '../../net/nft-runner.js';
import type { ScalerEventEmitterLike } from '../events/payloads.js';
export type { VmmDriver } from './firecracker/vmm.js';

/** Runs nft with JSON batches (the container and micro-VM backends' network policy); see src/net. */
export type { NftRunner } from '../../net/nft-runner.js';

import type { CgroupDriver } from './bare-metal/cgroup-driver.js';

export type { CgroupDriver };

/**
 * What every backend is built from. Shared slots are always there; the typed slots for host tools
 * are filled by the composition root (or a test) only for backends that use them.
 */
export interface BackendDeps {
  logger: Logger;
  clock: Clock;
  store: Store;
  /** The main config file; relative paths in entries resolve against its directory. */
  configPath: string;
  hostEnv?: NodeJS.ProcessEnv;
  docker?: Docker;
  nft?: NftRunner;
  /** The VM backend's hypervisor; built from the entry's `vmm` when absent. */
  vmm?: VmmDriver;
  /** The config's `firecracker:` block (bridge, CIDR, gateway, nft table); defaults when absent. */
  vmNetwork?: FirecrackerNetwork | undefined;
  /** nft isolation for one bridge (src/net); VMs run unconfined without it (logged). */
  isolationFor?: (o: { table: string; bridge: string; subnet: string }) => AgentIsolation;
  /** Free-space probe and threshold for the VM disk guard before each spawn. */
  vmStatfs?: StatfsFn;
  vmDiskThresholdBytes?: number;
  /** Bare-metal `enforceCgroups` driver; detected on the host when absent. */
  cgroups?: CgroupDriver;
  /** What the bare-metal limits chooser asks of the host (root, cgroup tree, user manager); probed when absent. */
  limitsProbes?: Partial<LimitsProbes>;
  /** The orchestrator's data dir (bare-metal hides it from sandboxed agents). */
  dataDir?: string;
  /** Files no job may read (the bootstrap admin token, the TLS key): hidden from sandboxed agents. */
  secretFiles?: string[];
  /** What the host allows for confining bare-metal jobs; probed at start-up when absent. */
  hostFacts?: HostFacts;
  /** Builds a container scaler's engine client (composition root); used when `docker` is not given. */
  connectEngine?: (entry: ScalerEntry) => Promise<{ docker: Docker; engine: EngineLocation }>;
  /** Where `docker` points (runtime, socket); with `docker` given, taken as a local socket of that runtime. */
  engine?: EngineLocation;
  /** The host firewall for bridge-attached agents (container, job-image, micro-VM). */
  isolation?: AgentIsolation;
  /** hostAccess entries the orchestrator itself directs agents at (storage host access). */
  hostServices?: string[];
  /** Event scalers: where scale events go (the composition root's router; a counting fake in tests). */
  scaleEvents?: ScalerEventEmitterLike & { checkTargets?(scaler: string, targets: readonly string[]): void };
}

/** A container engine as the composition root found it. */
export interface EngineLocation {
  runtime: 'docker' | 'podman';
  socketPath: string;
  local: boolean;
}
