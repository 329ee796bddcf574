import type { FirecrackerNetwork, LabelSetConfig, ScalerEntry } from '../../../config/index.js';
import { parseIpv4Cidr } from '../../../config/addresses.js';
import type { AgentRuleRequest } from '../../../net/isolation.js';
import type { Logger } from '../../../util/logger.js';
import type { SpawnContext } from '../../types.js';
import { buildGuestEnv, guestHostsLines } from './guest-env.js';
import type { IpLease } from './ip-allocator.js';
import { vmFiles } from './vm-dir.js';
import type { VmLaunch } from './vmm.js';

/** vCPUs: the effective CPU limit rounded up (at least 1), else the configured count. */
export function vcpusFor(ctx: Pick<SpawnContext, 'limits'>, fallback: number): number {
  const cpus = ctx.limits?.cpus ?? 0;
  return cpus > 0 ? Math.max(1, Math.ceil(cpus)) : fallback;
}

/** Memory: the effective limit in whole MiB, else the configured size. */
export function memMibFor(ctx: Pick<SpawnContext, 'limits'>, fallback: number): number {
  const mib = Math.floor((ctx.limits?.memBytes ?? 0) / (1024 * 1024));
  return mib > 0 ? mib : fallback;
}

/** Everything the driver needs for one VM; the agent's secrets only in `guestEnv`, never on the command line. */
export function vmLaunchFor(o: {
  ctx: SpawnContext;
  ls: LabelSetConfig;
  entry: ScalerEntry;
  dir: string;
  lease: IpLease;
  net: FirecrackerNetwork;
  orchestratorUrl: string;
  resolvePath: (p: string) => string;
  hostEnv: NodeJS.ProcessEnv;
  log: Logger;
}): VmLaunch {
  const { ctx, ls, entry, lease, net } = o;
  const files = vmFiles(o.dir);
  const prefix = parseIpv4Cidr(net.cidr)!.prefix;
  return {
    id: ctx.agentId,
    dir: o.dir,
    kernel: o.resolvePath(ls.kernelPath ?? entry.kernelPath!),
    initrd: entry.initrdPath ? o.resolvePath(entry.initrdPath) : undefined,
    rootfs: o.resolvePath(ls.rootfsPath!),
    overlay: files.overlay,
    vcpus: vcpusFor(ctx, ls.vcpuCount ?? entry.vcpuCount),
    memMib: memMibFor(ctx, ls.memSizeMib ?? entry.memSizeMib),
    // The guest configures eth0 itself from kici.net (the stock kernel has no ip= autoconfig).
    bootArgs: `console=ttyS0 rdinit=/init panic=-1 reboot=t quiet kici.net=${lease.ip},${net.gateway},${prefix}`,
    tap: lease.tap,
    mac: lease.mac,
    ip: lease.ip,
    guestEnv: buildGuestEnv(
      {
        orchestratorUrl: o.orchestratorUrl,
        agentId: ctx.agentId,
        auth: ctx.auth,
        fullLabels: ctx.fullLabels,
        gatewayIp: net.gateway,
        hostsLines: guestHostsLines(entry.extraHosts, net.gateway),
      },
      ls,
      o.hostEnv,
      o.log,
    ),
    serialLog: files.serialLog,
    vmmLog: files.vmmLog,
  };
}

/**
 * The firewall request for a VM: the orchestrator as the guest dials it, the services on this host
 * the orchestrator directs agents at (as for containers), the label set's policy.
 */
export function ruleRequestFor(
  agentId: string,
  scalerName: string,
  ip: string,
  orch: { host: string; port: number },
  ls: LabelSetConfig,
  hostServices: readonly string[] = [],
): AgentRuleRequest {
  const p = ls.networkPolicy;
  return {
    agentId,
    scalerName,
    ip,
    orchestrator: { address: orch.host, port: orch.port },
    hostAccess: [...hostServices],
    policy: p ? { ...p, denyAll: p.denyAll ?? false } : undefined,
  };
}
