/**
 * The checks of the micro-VM host set-up, shared by `kici-admin firecracker verify` and `diagnose`:
 * the bridge with its gateway address, the nftables table with the VMs' NAT and isolation base
 * chains, IPv4 forwarding, /dev/kvm, and each VM scaler's binaries, kernel and chroot base.
 */
import { parseIpv4Cidr } from '../../../config/addresses.js';
import type { FirecrackerNetwork } from '../../../config/index.js';
import type { NftObject, NftRunner } from '../../../net/nft-runner.js';
import { commandRunner, vmNftRunner, type CommandRunner } from './host-net.js';

export type RowStatus = 'PASS' | 'WARN' | 'FAIL';
export interface HostRow {
  name: string;
  status: RowStatus;
  message: string;
  fix?: string;
}

/** What a VM scaler asks of the host. */
export interface VmHostNeeds {
  scaler: string;
  vmm: 'firecracker' | 'qemu';
  binaries: { what: string; path: string | undefined }[];
  kernelPath: string | undefined;
  chrootBaseDir: string;
}

/** The host, as seen by these commands; the CLI passes the real one, tests a fake. */
export interface HostPorts {
  run: CommandRunner;
  nft: NftRunner;
  fs: {
    /** Can the current user open it this way? ('r', 'rw' or 'x'). False when missing. */
    access(path: string, mode: 'r' | 'rw' | 'x'): Promise<boolean>;
    isDir(path: string): Promise<boolean>;
    readText(path: string): Promise<string | undefined>;
    writeText(path: string, text: string): Promise<void>;
    remove(path: string): Promise<void>;
    /** mkdir -p; true when the directory did not exist. */
    mkdirp(path: string): Promise<boolean>;
    /** Remove an empty directory; false when it holds anything (VM dirs are never deleted here). */
    rmdirIfEmpty(path: string): Promise<boolean>;
  };
}

/** The real `ip`/`sysctl` and `nft`, through `sudo -n` when a VM scaler sets requireSudo. */
export function hostTools(
  sudo: boolean,
  hostEnv: NodeJS.ProcessEnv,
  timeoutMs?: number,
): Pick<HostPorts, 'run' | 'nft'> {
  return {
    run: commandRunner({ sudo, hostEnv, ...(timeoutMs !== undefined ? { timeoutMs } : {}) }),
    nft: vmNftRunner(sudo, hostEnv),
  };
}

export const NAT_CHAIN = 'postrouting';
export const IP_FORWARD = '/proc/sys/net/ipv4/ip_forward';

const fail = (name: string, message: string, fix?: string): HostRow => ({
  name,
  status: 'FAIL',
  message,
  ...(fix ? { fix } : {}),
});
const pass = (name: string, message: string): HostRow => ({ name, status: 'PASS', message });
const warn = (name: string, message: string, fix?: string): HostRow => ({
  name,
  status: 'WARN',
  message,
  ...(fix ? { fix } : {}),
});

export interface BridgeFacts {
  exists: boolean;
  isBridge: boolean;
  up: boolean;
  addrs: string[];
}

export async function bridgeFacts(run: CommandRunner, name: string): Promise<BridgeFacts> {
  let link: { operstate?: string; flags?: string[]; linkinfo?: { info_kind?: string } }[];
  try {
    link = JSON.parse(await run('ip', ['-j', '-d', 'link', 'show', 'dev', name])) as typeof link;
  } catch {
    return { exists: false, isBridge: false, up: false, addrs: [] };
  }
  const l = link[0] ?? {};
  const addrs = (
    JSON.parse(await run('ip', ['-j', '-4', 'addr', 'show', 'dev', name])) as {
      addr_info?: { local: string; prefixlen: number }[];
    }[]
  ).flatMap((a) => (a.addr_info ?? []).map((i) => `${i.local}/${i.prefixlen}`));
  return {
    exists: true,
    isBridge: l.linkinfo?.info_kind === 'bridge',
    up: (l.flags ?? []).includes('UP'),
    addrs,
  };
}

/** `<gateway>/<prefix>`, the address the bridge carries. */
export function gatewayCidr(network: FirecrackerNetwork): string {
  return `${network.gateway}/${parseIpv4Cidr(network.cidr)!.prefix}`;
}

export async function tableObjects(nft: NftRunner, table: string): Promise<NftObject[] | undefined> {
  try {
    return await nft.list(['table', 'inet', table]);
  } catch {
    return undefined;
  }
}

export function chainOf(objects: NftObject[], name: string): Record<string, unknown> | undefined {
  return objects.map((o) => o.chain).find((c) => c?.name === name);
}

export function hasNat(objects: NftObject[]): boolean {
  const chain = chainOf(objects, NAT_CHAIN);
  return (
    chain?.type === 'nat' &&
    objects.some(
      (o) => o.rule?.chain === NAT_CHAIN && JSON.stringify(o.rule.expr ?? []).includes('masquerade'),
    )
  );
}

/** The check `diagnose` and `verify` share: the bridge, and its table's NAT and isolation chains. */
export async function checkNetwork(
  ports: Pick<HostPorts, 'run' | 'nft'>,
  network: FirecrackerNetwork,
): Promise<HostRow[]> {
  const rows: HostRow[] = [];
  const name = `bridge:${network.bridgeName}`;
  const provision =
    'run kici-admin firecracker provision (or let the orchestrator do it: firecracker.autoProvisionHost)';
  const b = await bridgeFacts(ports.run, network.bridgeName);
  const want = gatewayCidr(network);
  if (!b.exists) rows.push(fail(name, `bridge ${network.bridgeName} does not exist`, provision));
  else if (!b.isBridge)
    rows.push(
      fail(
        name,
        `${network.bridgeName} exists but is not a bridge`,
        'rename firecracker.bridgeName or remove that interface',
      ),
    );
  else if (!b.addrs.includes(want))
    rows.push(
      fail(
        name,
        `bridge ${network.bridgeName} lacks the gateway address ${want} (has: ${b.addrs.join(', ') || 'none'})`,
        provision,
      ),
    );
  else if (!b.up)
    rows.push(warn(name, `bridge ${network.bridgeName} is down`, `ip link set ${network.bridgeName} up`));
  else rows.push(pass(name, `bridge ${network.bridgeName} up with ${want}`));

  const objects = await tableObjects(ports.nft, network.table);
  const fw = `firecracker-network:${network.table}`;
  if (!objects) rows.push(fail(fw, `nftables table inet ${network.table} is missing`, provision));
  else {
    const missing = [
      ...(hasNat(objects) ? [] : [`NAT (${NAT_CHAIN} masquerade for ${network.cidr})`]),
      ...['forward', 'input'].filter((c) => !chainOf(objects, c)).map((c) => `isolation chain ${c}`),
    ];
    rows.push(
      missing.length
        ? fail(fw, `table inet ${network.table} lacks ${missing.join(', ')}`, provision)
        : pass(fw, `table inet ${network.table} has the VMs' NAT and isolation chains`),
    );
  }
  return rows;
}

/** Every row `verify` prints: the network, forwarding, /dev/kvm, and each VM scaler's files. */
export async function verifyHost(
  ports: HostPorts,
  network: FirecrackerNetwork,
  needs: VmHostNeeds[],
): Promise<HostRow[]> {
  const rows = await checkNetwork(ports, network);
  const fwd = (await ports.fs.readText(IP_FORWARD))?.trim();
  rows.push(
    fwd === '1'
      ? pass('ip-forward', 'IPv4 forwarding is on')
      : warn(
          'ip-forward',
          'IPv4 forwarding is off: VMs reach the orchestrator but not the internet',
          'kici-admin firecracker provision (or sysctl -w net.ipv4.ip_forward=1)',
        ),
  );
  if (needs.some((n) => n.vmm === 'firecracker'))
    rows.push(
      (await ports.fs.access('/dev/kvm', 'rw'))
        ? pass('kvm', '/dev/kvm is readable and writable')
        : fail(
            'kvm',
            '/dev/kvm is missing or not read-writable by this user',
            'enable virtualisation and add the user to the kvm group',
          ),
    );
  for (const n of needs) {
    for (const bin of n.binaries)
      rows.push(
        !bin.path
          ? fail(
              `${bin.what}:${n.scaler}`,
              `${bin.what}Path is not set`,
              `set ${bin.what}Path in the scaler entry`,
            )
          : (await ports.fs.access(bin.path, 'x'))
            ? pass(`${bin.what}:${n.scaler}`, `${bin.path} is executable`)
            : fail(
                `${bin.what}:${n.scaler}`,
                `${bin.path} is missing or not executable`,
                `install ${bin.what} there or fix ${bin.what}Path`,
              ),
      );
    rows.push(
      n.kernelPath && (await ports.fs.access(n.kernelPath, 'r'))
        ? pass(`kernel:${n.scaler}`, `${n.kernelPath} is readable`)
        : fail(
            `kernel:${n.scaler}`,
            `${n.kernelPath ?? 'kernelPath (not set)'} is missing or unreadable`,
            'fix kernelPath in the scaler entry',
          ),
    );
    if (n.vmm === 'firecracker')
      rows.push(
        (await ports.fs.isDir(n.chrootBaseDir))
          ? (await ports.fs.access(n.chrootBaseDir, 'rw'))
            ? pass(`chroot:${n.scaler}`, `${n.chrootBaseDir} is a writable directory`)
            : fail(
                `chroot:${n.scaler}`,
                `${n.chrootBaseDir} is not writable by this user`,
                `chown it to the orchestrator's user, or run with requireSudo`,
              )
          : warn(
              `chroot:${n.scaler}`,
              `${n.chrootBaseDir} does not exist yet`,
              'kici-admin firecracker provision creates it',
            ),
      );
  }
  return rows;
}

/** The `firecracker-network` row of `diagnose`: the bridge and table rows folded into one, worst first. */
export function networkDiagnoseRow(rows: readonly HostRow[]): {
  name: string;
  status: RowStatus;
  message: string;
} {
  const rank: Record<RowStatus, number> = { PASS: 0, WARN: 1, FAIL: 2 };
  const worst = rows.reduce<RowStatus>((w, r) => (rank[r.status] > rank[w] ? r.status : w), 'PASS');
  const shown = worst === 'PASS' ? rows : rows.filter((r) => r.status !== 'PASS');
  return {
    name: 'firecracker-network',
    status: worst,
    message: shown.map((r) => (r.fix ? `${r.message} (fix: ${r.fix})` : r.message)).join('; '),
  };
}
