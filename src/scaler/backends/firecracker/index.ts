import { statfs } from 'node:fs/promises';
import { dirname, isAbsolute, join, resolve } from 'node:path';
import { silentLogger, type Logger } from '../../../util/logger.js';
import { parseIpv4Cidr } from '../../../config/addresses.js';
import {
  firecrackerNetworkSchema,
  type FirecrackerNetwork,
  type ScalerConfig,
  type ScalerEntry,
} from '../../../config/index.js';
import { NftAgentIsolation, nftRequiredTool, type AgentIsolation } from '../../../net/index.js';
import type { BackendDeps } from '../deps.js';
import type { BackendDescriptor } from '../descriptor.js';
import { VmScalerBackend } from './backend.js';
import {
  DEFAULT_DISK_GUARD_THRESHOLD_BYTES,
  runDiskGuard as guard,
  type DiskGuardOpts,
  type DiskGuardResult,
} from './disk-guard.js';
import { FirecrackerDriver } from './firecracker-driver.js';
import { commandRunner, HostNet, vmNftRunner } from './host-net.js';
import { DbIpAllocator, InMemoryIpAllocator, type IpAllocator } from './ip-allocator.js';
import { chooseQemuAccel, QemuDriver } from './qemu-driver.js';
import { vmTools } from './tools.js';
import type { VmmDriver } from './vmm.js';

const resolverFor = (configPath: string) => (p: string) =>
  isAbsolute(p) ? p : resolve(dirname(configPath), p);

async function driverFor(
  entry: ScalerEntry,
  deps: BackendDeps,
  resolvePath: (p: string) => string,
  hostEnv: NodeJS.ProcessEnv,
): Promise<VmmDriver> {
  if (deps.vmm) return deps.vmm;
  if (entry.vmm === 'qemu') {
    const binary = entry.qemuPath ? resolvePath(entry.qemuPath) : 'qemu-system-x86_64';
    const accel = await chooseQemuAccel(binary, resolvePath(entry.kernelPath!), hostEnv, deps.logger);
    return new QemuDriver({ binary, accel, logger: deps.logger, hostEnv });
  }
  return new FirecrackerDriver({
    firecrackerPath: resolvePath(entry.firecrackerPath!),
    jailer:
      entry.jailerPath && entry.uid !== undefined && entry.gid !== undefined
        ? {
            path: resolvePath(entry.jailerPath),
            uid: entry.uid,
            gid: entry.gid,
            chrootBase: resolvePath(entry.chrootBaseDir),
          }
        : undefined,
    logger: deps.logger,
    hostEnv,
  });
}

/**
 * The VMs' firewall: the composition root's (tests pass their own) or nftables in the table the
 * `firecracker:` block names, with the bridge gateway as the orchestrator's address.
 */
function isolationFor(
  entry: ScalerEntry,
  deps: BackendDeps,
  network: FirecrackerNetwork,
  hostEnv: NodeJS.ProcessEnv,
): AgentIsolation {
  const o = { table: network.table, bridge: network.bridgeName, subnet: network.cidr };
  if (deps.isolationFor) return deps.isolationFor(o);
  const runner = deps.nft ?? vmNftRunner(entry.requireSudo, hostEnv);
  return new NftAgentIsolation({
    runner,
    table: o.table,
    gateway: network.gateway,
    subnet: o.subnet,
    logger: deps.logger,
  });
}

/** Build the backend; `allocator` lets the disk guard use a throw-away in-memory one. */
export async function createVmBackend(
  entry: ScalerEntry,
  deps: BackendDeps,
  allocator?: IpAllocator,
  /** The disk guard's throw-away backend only sweeps: it neither checks nor creates the bridge. */
  sweepOnly = false,
): Promise<VmScalerBackend> {
  const resolvePath = resolverFor(deps.configPath);
  const network = deps.vmNetwork ?? firecrackerNetworkSchema.parse({});
  // Read here, once: every host process this backend starts gets only hostToolEnv's part of it.
  const hostEnv = deps.hostEnv ?? process.env;
  const run = commandRunner({ sudo: entry.requireSudo, hostEnv });
  const hostNet = new HostNet(run);
  const prefix = parseIpv4Cidr(network.cidr)!.prefix;
  if (sweepOnly) {
    // nothing to provision
  } else if (network.autoProvisionHost) {
    const how = await hostNet.ensureBridge(network.bridgeName, `${network.gateway}/${prefix}`);
    if (how === 'created') deps.logger.info({ bridge: network.bridgeName }, 'created the VM bridge');
  } else if (!(await hostNet.bridgeExists(network.bridgeName))) {
    throw new Error(
      `scaler "${entry.name}": bridge ${network.bridgeName} does not exist; create it or set firecracker.autoProvisionHost: true`,
    );
  }
  const driver = await driverFor(entry, deps, resolvePath, hostEnv);
  const backend = new VmScalerBackend({
    entry,
    network,
    driver,
    allocator: allocator ?? new DbIpAllocator(deps.store, entry.name, network.cidr, network.gateway),
    hostNet,
    run,
    isolation: sweepOnly ? undefined : isolationFor(entry, deps, network, hostEnv),
    logger: deps.logger,
    resolvePath,
    disk: {
      thresholdBytes: deps.vmDiskThresholdBytes ?? DEFAULT_DISK_GUARD_THRESHOLD_BYTES,
      statfs: deps.vmStatfs ?? statfs,
    },
    hostEnv,
    hostServices: deps.hostServices,
    clock: deps.clock,
    sweepsUnleasedTaps: !sweepOnly,
  });
  deps.logger.info(
    { scaler: entry.name, vmm: driver.describe(), bridge: network.bridgeName },
    'VM scaler ready',
  );
  return backend;
}

/** Is the VM bridge there? Start-up needs it at once when the orchestrator may not create it. */
export function vmBridgeExists(name: string, sudo: boolean, hostEnv: NodeJS.ProcessEnv): Promise<boolean> {
  return new HostNet(commandRunner({ sudo, hostEnv })).bridgeExists(name);
}

/**
 * A backend that only sweeps: leases live in memory (no store), no hypervisor is probed, no bridge
 * is checked or created and no firewall is touched. Liveness needs only /proc and the VM
 * directories, so it finds dead VMs with the orchestrator down (the disk guard, reap-orphans).
 */
export function vmSweeper(
  entry: ScalerEntry,
  deps: Pick<BackendDeps, 'logger' | 'configPath' | 'hostEnv' | 'vmNetwork'>,
): Promise<VmScalerBackend> {
  const network = deps.vmNetwork ?? firecrackerNetworkSchema.parse({});
  const allocator = new InMemoryIpAllocator(entry.name, network.cidr, network.gateway);
  // Only the sweep runs, so the store is never reached.
  const sweepDeps = { ...deps, vmNetwork: network, vmm: inertDriver } as BackendDeps;
  return createVmBackend(entry, sweepDeps, allocator, true);
}

/** How the registry builds a VM scaler (`type: firecracker`, VMM firecracker or qemu). */
export const vmDescriptor: BackendDescriptor = {
  type: 'firecracker',
  requiredTools: (entry, deps) => [...vmTools(entry, resolverFor(deps.configPath)), nftRequiredTool()],
  async create(entry, deps) {
    const backend = await createVmBackend(entry, deps);
    // Start-up sweep: artifacts of VMs whose VMM is dead. Running VMs are left for adopt/reap.
    await backend.cleanupOrphans();
    backend.startPeriodicSweep();
    return backend;
  },
  sweeper: (entry, deps) => vmSweeper(entry, deps),
};

/**
 * runDiskGuard with its default reap: for every VM scaler, a sweep-only backend runs the
 * liveness-driven orphan sweep (dead VMs only, so it is safe beside a live orchestrator).
 */
export type { DiskGuardResult };

export function runDiskGuard(
  opts: DiskGuardOpts & { logger?: Logger; configPath?: string },
): Promise<DiskGuardResult> {
  const reapFn =
    opts.reapFn ??
    (async (cfg: ScalerConfig) => {
      let reaped = 0;
      for (const entry of cfg.scalers.filter((s) => s.type === 'firecracker')) {
        const sweeper = await vmSweeper(entry, {
          logger: opts.logger ?? silentLogger(),
          configPath: opts.configPath ?? join(process.cwd(), 'scalers.yaml'),
          vmNetwork: cfg.firecracker,
        });
        reaped += await sweeper.cleanupOrphans();
      }
      return { reaped };
    });
  return guard({ ...opts, reapFn });
}

/** The sweep never starts a VM; liveness needs only /proc, so no hypervisor is probed. */
const inertDriver: VmmDriver = {
  kind: 'qemu',
  describe: () => 'none (sweep only)',
  start: () => Promise.reject(new Error('a sweep-only VM backend starts no VMs')),
  stop: () => Promise.resolve(),
  owns: () => Promise.resolve(false),
};
