/**
 * The host set-up the micro-VM backend needs, made and unmade by `kici-admin firecracker provision |
 * teardown` (the checks are in host-checks.ts): the bridge with its gateway address, the nftables
 * table with the VMs' NAT and the isolation base chains, IPv4 forwarding and the jailer chroot base.
 * Provision records what it made, so that teardown removes that and nothing else (a bridge or a
 * table an operator made stays).
 */
import { baseCommands } from '../../../net/nft-rules.js';
import type { NftCommand } from '../../../net/nft-runner.js';
import { parseIpv4Cidr } from '../../../config/addresses.js';
import type { FirecrackerNetwork } from '../../../config/index.js';
import { errorMessage } from '../../../util/errors.js';
import {
  bridgeFacts,
  chainOf,
  gatewayCidr,
  hasNat,
  IP_FORWARD,
  NAT_CHAIN,
  tableObjects,
  type HostPorts,
  type VmHostNeeds,
} from './host-checks.js';
import { bridgeMac } from './host-net.js';

export * from './host-checks.js';

/** What provision made on this host (teardown's whole list). */
export interface ProvisionRecord {
  bridge?: string;
  /** The gateway address added to a bridge that was already there (`<cidr> dev <bridge>`). */
  address?: { cidr: string; dev: string };
  table?: string;
  /** The NAT chain added to a table that was already there. */
  natChain?: string;
  /** IPv4 forwarding was off before provision turned it on. */
  ipForward?: boolean;
  chrootDirs?: string[];
}

const NAT_COMMENT = 'kici vm nat';

function natCommands(network: FirecrackerNetwork): NftCommand[] {
  const t = { family: 'inet', table: network.table };
  const net = parseIpv4Cidr(network.cidr)!;
  const [addr] = network.cidr.split('/');
  return [
    {
      add: {
        chain: { ...t, name: NAT_CHAIN, type: 'nat', hook: 'postrouting', prio: 100, policy: 'accept' },
      },
    },
    { flush: { chain: { ...t, name: NAT_CHAIN } } },
    {
      add: {
        rule: {
          ...t,
          chain: NAT_CHAIN,
          comment: NAT_COMMENT,
          expr: [
            {
              match: {
                op: '==',
                left: { payload: { protocol: 'ip', field: 'saddr' } },
                right: { prefix: { addr, len: net.prefix } },
              },
            },
            { match: { op: '!=', left: { meta: { key: 'oifname' } }, right: network.bridgeName } },
            { masquerade: null },
          ],
        },
      },
    },
  ];
}

/**
 * Make what is missing, and only that; returns the record merged with an earlier one (what a first
 * provision made stays teardown's to remove after a second one found it present).
 */
export async function provisionHost(
  ports: HostPorts,
  network: FirecrackerNetwork,
  needs: VmHostNeeds[],
  earlier: ProvisionRecord,
): Promise<{ record: ProvisionRecord; made: string[] }> {
  const record: ProvisionRecord = { ...earlier };
  const made: string[] = [];
  const bridge = network.bridgeName;
  const b = await bridgeFacts(ports.run, bridge);
  if (b.exists && !b.isBridge)
    throw new Error(`${bridge} exists but is not a bridge; rename firecracker.bridgeName or remove it`);
  if (!b.exists) {
    // A set address: one taken from the ports would move as VMs come and go (see bridgeMac).
    await ports.run('ip', ['link', 'add', bridge, 'address', bridgeMac(network.gateway), 'type', 'bridge']);
    record.bridge = bridge;
    made.push(`bridge ${bridge}`);
  }
  const want = gatewayCidr(network);
  if (!b.addrs.includes(want)) {
    await ports.run('ip', ['addr', 'add', want, 'dev', bridge]);
    if (b.exists) record.address = { cidr: want, dev: bridge };
    made.push(`address ${want} on ${bridge}`);
  }
  if (!b.up) await ports.run('ip', ['link', 'set', bridge, 'up']);

  const objects = await tableObjects(ports.nft, network.table);
  if (!objects || !hasNat(objects) || !chainOf(objects, 'forward') || !chainOf(objects, 'input')) {
    await ports.nft.run([
      ...baseCommands({ table: network.table, gateway: network.gateway, subnet: network.cidr }),
      ...natCommands(network),
    ]);
    if (!objects) {
      record.table = network.table;
      made.push(`nftables table inet ${network.table}`);
    } else if (!chainOf(objects, NAT_CHAIN)) {
      record.natChain = network.table;
      made.push(`NAT chain in table inet ${network.table}`);
    } else made.push(`rules of table inet ${network.table}`);
  }

  if ((await ports.fs.readText(IP_FORWARD))?.trim() !== '1') {
    await ports.run('sysctl', ['-w', 'net.ipv4.ip_forward=1']);
    record.ipForward = true;
    made.push('IPv4 forwarding on');
  }
  for (const dir of new Set(needs.filter((n) => n.vmm === 'firecracker').map((n) => n.chrootBaseDir)))
    if (await ports.fs.mkdirp(dir)) {
      record.chrootDirs = [...new Set([...(record.chrootDirs ?? []), dir])];
      made.push(`directory ${dir}`);
    }
  return { record, made };
}

/** Undo what the record says provision made; VMs still on the bridge stop it (nothing is removed). */
export async function teardownHost(
  ports: HostPorts,
  record: ProvisionRecord,
): Promise<{ removed: string[]; kept: string[] }> {
  const removed: string[] = [];
  const kept: string[] = [];
  if (record.bridge) {
    const out = await ports.run('ip', ['-o', 'link', 'show', 'master', record.bridge]).catch(() => '');
    const ports_ = out.split('\n').filter((l) => l.trim());
    if (ports_.length)
      throw new Error(
        `bridge ${record.bridge} still has ${ports_.length} interface(s) attached (VMs running?); stop them first`,
      );
  }
  if (record.table) {
    await ports.nft
      .run([{ delete: { table: { family: 'inet', name: record.table } } }])
      .catch((err: unknown) => {
        if (!/No such file|does not exist/i.test(errorMessage(err))) throw err;
      });
    removed.push(`nftables table inet ${record.table}`);
  } else if (record.natChain) {
    const t = { family: 'inet', table: record.natChain, name: NAT_CHAIN };
    await ports.nft.run([{ flush: { chain: t } }, { delete: { chain: t } }]).catch((err: unknown) => {
      if (!/No such file|does not exist/i.test(errorMessage(err))) throw err;
    });
    removed.push(`NAT chain in table inet ${record.natChain}`);
  }
  if (record.bridge) {
    await ports.run('ip', ['link', 'del', 'dev', record.bridge]).catch((err: unknown) => {
      if (!/Cannot find device|does not exist/.test(errorMessage(err))) throw err;
    });
    removed.push(`bridge ${record.bridge}`);
  }
  if (record.address && record.address.dev !== record.bridge) {
    const { cidr, dev } = record.address;
    await ports.run('ip', ['addr', 'del', cidr, 'dev', dev]).catch((err: unknown) => {
      if (!/Cannot assign|Cannot find device|does not exist/.test(errorMessage(err))) throw err;
    });
    removed.push(`address ${cidr} on ${dev}`);
  }
  if (record.ipForward) {
    await ports.run('sysctl', ['-w', 'net.ipv4.ip_forward=0']);
    removed.push('IPv4 forwarding (off again)');
  }
  for (const dir of record.chrootDirs ?? [])
    if (await ports.fs.rmdirIfEmpty(dir)) removed.push(`directory ${dir}`);
    else kept.push(`directory ${dir} (not empty)`);
  return { removed, kept };
}
