import type { Logger } from '../../../util/logger.js';
import type { AgentIsolation } from '../../../net/isolation.js';
import type { FirecrackerNetwork } from '../../../config/index.js';
import type { ManagedAgent, SpawnContext } from '../../types.js';
import type { HostNet } from './host-net.js';
import type { IpAllocator, IpLease } from './ip-allocator.js';
import type { FileTail } from './log-tail.js';
import type { VmRecord } from './vm-dir.js';
import type { VmmDriver } from './vmm.js';

/** One VM this process holds. */
export interface TrackedVm {
  agent: ManagedAgent;
  lease: IpLease;
  dir: string;
  pid: number | undefined;
  registered: boolean;
  destroying: boolean;
  tails: FileTail[];
  tail: string[];
}

/** What recovery and the orphan sweep need from the backend (kept apart to avoid an import cycle). */
export interface VmHost {
  readonly name: string;
  readonly base: string;
  /** The VMs the backend holds; read-only here, so the backend stays the one that drops them. */
  readonly vms: ReadonlyMap<string, TrackedVm>;
  readonly log: Logger;
  readonly opts: {
    allocator: IpAllocator;
    hostNet: HostNet;
    isolation: AgentIsolation | undefined;
    driver: VmmDriver;
    network: FirecrackerNetwork;
    sweepsUnleasedTaps?: boolean | undefined;
  };
  /** Hold a VM found running (adoption): its id counts as live and its teardown is the backend's. */
  trackVm(t: TrackedVm): void;
  removeArtifacts(agentId: string, lease: IpLease | undefined): Promise<void>;
  startTails(t: TrackedVm, ctx: Pick<SpawnContext, 'onEvent'> | undefined): void;
}

export function newTrackedVm(
  ctx: Pick<SpawnContext, 'agentId' | 'labelSet'>,
  lease: IpLease,
  dir: string,
): TrackedVm {
  const agent: ManagedAgent = {
    id: ctx.agentId,
    labelSet: ctx.labelSet,
    backendRef: '',
    spawnedAt: Date.now(),
    state: 'spawning',
  };
  return { agent, lease, dir, pid: undefined, registered: false, destroying: false, tails: [], tail: [] };
}

/** What the VM's directory records first, so recovery and the orphan sweep can tell it is ours. */
export function vmRecordOf(scalerName: string, t: TrackedVm): VmRecord {
  const { agent, lease } = t;
  return {
    agentId: agent.id,
    scalerName,
    labelSet: agent.labelSet,
    ip: lease.ip,
    tap: lease.tap,
    startedAt: agent.spawnedAt,
  };
}

/** getScalerContext for a VM: where it sits on the host (status, diagnose, `firecracker list`). */
export function vmContext(t: TrackedVm, driver: VmmDriver, net: FirecrackerNetwork): Record<string, unknown> {
  return {
    backendType: 'firecracker',
    vmm: driver.describe(),
    pid: t.pid,
    ip: t.lease.ip,
    tap: t.lease.tap,
    mac: t.lease.mac,
    bridge: net.bridgeName,
    gateway: net.gateway,
    netmask: net.netmask,
  };
}
