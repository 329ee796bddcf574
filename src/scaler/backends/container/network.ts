/** The isolated agent bridge (kici-agent-net) and the address an agent dials the host at. */
import type Docker from 'dockerode';
import { statusOf } from './engine-errors.js';

export const ISOLATED_NETWORK_NAME = 'kici-agent-net';
export const ISOLATED_NETWORK_SUBNET = '172.30.0.0/16';
export const ISOLATED_NETWORK_GATEWAY = '172.30.0.1';

export interface AgentNetwork {
  id: string;
  /** The host-side bridge interface, where the firewall rules attach. */
  bridge: string;
}

/** The name filter is a substring match, so the exact name is checked here. */
async function findNetwork(docker: Docker): Promise<string | undefined> {
  const nets = await docker.listNetworks({ filters: { name: [ISOLATED_NETWORK_NAME] } });
  return nets.find((n) => n.Name === ISOLATED_NETWORK_NAME)?.Id;
}

/** Create kici-agent-net when missing; another orchestrator creating it at the same time is fine. */
export async function ensureIsolatedNetwork(docker: Docker): Promise<AgentNetwork> {
  let id = await findNetwork(docker);
  if (!id) {
    try {
      const net = await docker.createNetwork({
        Name: ISOLATED_NETWORK_NAME,
        Driver: 'bridge',
        CheckDuplicate: true,
        IPAM: {
          Driver: 'default',
          Config: [{ Subnet: ISOLATED_NETWORK_SUBNET, Gateway: ISOLATED_NETWORK_GATEWAY }],
        },
        Labels: { 'kici-managed': 'true' },
      });
      id = net.id;
    } catch (err) {
      // Another orchestrator (or backend) created it between our look and our create. Docker says so
      // with 409 for the name, or with 403 "Pool overlaps" when the subnet was taken first: either
      // way the network now exists under our name, and we use it.
      id = await findNetwork(docker);
      if (!id) {
        if (statusOf(err) === 409)
          throw new Error(`${ISOLATED_NETWORK_NAME} was reported as existing but cannot be found`, {
            cause: err,
          });
        throw err;
      }
    }
  }
  const info = (await docker.getNetwork(id).inspect()) as {
    Id: string;
    Options?: Record<string, string>;
    network_interface?: string;
  };
  const bridge =
    info.Options?.['com.docker.network.bridge.name'] ??
    info.network_interface ??
    `br-${info.Id.slice(0, 12)}`;
  return { id: info.Id, bridge };
}

/** The gateway of a named network: how a container on it reaches this host. */
export async function networkGateway(docker: Docker, name: string): Promise<string | undefined> {
  try {
    const info = (await docker.getNetwork(name).inspect()) as {
      IPAM?: { Config?: { Gateway?: string; Subnet?: string }[] };
    };
    const v4 = info.IPAM?.Config?.filter((c) => c.Subnet && !c.Subnet.includes(':')) ?? [];
    const gw = v4.find((c) => c.Gateway)?.Gateway;
    // Docker's default bridge reports only its subnet; its gateway is the subnet's first address.
    return gw ?? (v4[0]?.Subnet ? firstHost(v4[0].Subnet) : undefined);
  } catch {
    return undefined;
  }
}

/** The first host address of an IPv4 subnet: 172.17.0.0/16 → 172.17.0.1. */
export function firstHost(cidr: string): string | undefined {
  const m = /^(\d+)\.(\d+)\.(\d+)\.(\d+)\/(\d+)$/.exec(cidr);
  if (!m) return undefined;
  const n = ((+m[1]! << 24) | (+m[2]! << 16) | (+m[3]! << 8) | +m[4]!) >>> 0;
  const bits = +m[5]!;
  const net = bits === 0 ? 0 : (n & (~0 << (32 - bits))) >>> 0;
  const h = net + 1;
  return [h >>> 24, (h >>> 16) & 255, (h >>> 8) & 255, h & 255].join('.');
}

/**
 * A loopback orchestrator URL means "this host"; inside a container, loopback is the container
 * itself, so the host is reached at the network's gateway instead.
 */
export function urlForContainer(url: string, gateway: string | undefined): string {
  if (!gateway) return url;
  const u = new URL(url);
  if (u.hostname !== '127.0.0.1' && u.hostname !== 'localhost' && u.hostname !== '[::1]') return url;
  // Only the host changes: URL.toString() would add a '/' path the operator never wrote.
  const m = /^([a-z][a-z0-9+.-]*:\/\/)([^/?#]*)(.*)$/is.exec(url);
  if (!m) {
    u.hostname = gateway;
    return u.toString();
  }
  const authority = m[2]!;
  const userinfo = authority.includes('@') ? authority.slice(0, authority.lastIndexOf('@') + 1) : '';
  const hostPort = authority.slice(userinfo.length);
  const hostEnd = hostPort.startsWith('[') ? hostPort.indexOf(']') + 1 : hostPort.indexOf(':');
  const port = hostEnd <= 0 ? '' : hostPort.slice(hostEnd);
  return `${m[1]}${userinfo}${gateway}${port}${m[3]}`;
}

/** The container's IPv4 address on `network`, once it runs. */
export async function containerAddress(
  docker: Docker,
  id: string,
  network: string,
): Promise<string | undefined> {
  const info = await docker.getContainer(id).inspect();
  const ip = info.NetworkSettings?.Networks?.[network]?.IPAddress;
  return ip || undefined;
}
