import { ipv4ToNumber, parseIpv4Cidr, prefixToMask } from '../../../config/addresses.js';
import type { Store } from '../../../store/index.js';

/** One VM's place on the bridge. */
export interface IpLease {
  ip: string;
  vmId: string;
  scalerName: string;
  tap: string;
  mac: string;
}

export class IpPoolExhaustedError extends Error {
  override readonly name = 'IpPoolExhaustedError';
}

export interface IpAllocator {
  /** The VM's lease; a second call for the same VM returns the same lease. */
  allocate(vmId: string): Promise<IpLease>;
  release(vmId: string): Promise<void>;
  getAllocations(): Promise<IpLease[]>;
  getAllocationForVm(vmId: string): Promise<IpLease | undefined>;
  /** Drop this scaler's leases whose VM is not in `live` (after a restart); returns them. */
  reclaim(live: ReadonlySet<string>): Promise<IpLease[]>;
}

function numberToIpv4(n: number): string {
  return [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255].join('.');
}

/** `kici-` + the id's last 8 characters: 13 characters, inside IFNAMSIZ (15). */
export function tapNameFor(vmId: string): string {
  return `kici-${vmId
    .replace(/[^0-9A-Za-z]/g, '')
    .slice(-8)
    .toLowerCase()}`;
}

/** Locally administered unicast (06:00) followed by the VM's last three octets: unique on the bridge. */
export function macFor(ip: string): string {
  const o = ip.split('.').map((p) => Number(p).toString(16).padStart(2, '0').toUpperCase());
  return `06:00:AC:${o[1]}:${o[2]}:${o[3]}`;
}

/** Host addresses of the subnet in ascending order: never the network, the broadcast or the gateway. */
export function usableAddresses(cidr: string, gateway: string): string[] {
  const net = parseIpv4Cidr(cidr);
  if (!net) throw new Error(`"${cidr}" is not an IPv4 CIDR`);
  const gw = ipv4ToNumber(gateway);
  const broadcast = (net.network | (~prefixToMask(net.prefix) >>> 0)) >>> 0;
  const out: string[] = [];
  for (let n = net.network + 1; n < broadcast; n++) if (n !== gw) out.push(numberToIpv4(n));
  return out;
}

type Row = {
  ip: string;
  vm_id: string;
  scaler_name: string;
  tap_device: string;
  mac_address: string;
};
const toLease = (r: Row): IpLease => ({
  ip: r.ip,
  vmId: r.vm_id,
  scalerName: r.scaler_name,
  tap: r.tap_device,
  mac: r.mac_address,
});

/**
 * Leases in the store (`ip_allocations`), shared by every scaler on the bridge: the primary key on
 * the address is what keeps two VMs apart, even across orchestrator processes, so a lost race just
 * retries with the next free address.
 */
export class DbIpAllocator implements IpAllocator {
  private readonly pool: string[];

  constructor(
    private readonly store: Store,
    private readonly scalerName: string,
    cidr: string,
    gateway: string,
  ) {
    this.pool = usableAddresses(cidr, gateway);
  }

  async allocate(vmId: string): Promise<IpLease> {
    for (let attempt = 0; attempt < 16; attempt++) {
      const mine = await this.getAllocationForVm(vmId);
      if (mine) return mine;
      const taken = new Set(
        (await this.store.db.selectFrom('ip_allocations').select('ip').execute()).map((r) => r.ip),
      );
      const ip = this.pool.find((a) => !taken.has(a));
      if (!ip) throw new IpPoolExhaustedError(`IP pool exhausted (${this.pool.length} addresses)`);
      const row = {
        ip,
        vm_id: vmId,
        scaler_name: this.scalerName,
        tap_device: tapNameFor(vmId),
        mac_address: macFor(ip),
      };
      const inserted = await this.store.db
        .insertInto('ip_allocations')
        .values(row)
        .onConflict((oc) => oc.doNothing())
        .returning('ip')
        .execute();
      if (inserted.length) return toLease(row);
    }
    throw new Error(`could not lease an address for ${vmId}: 16 conflicting attempts`);
  }

  async release(vmId: string): Promise<void> {
    await this.store.db.deleteFrom('ip_allocations').where('vm_id', '=', vmId).execute();
  }

  async getAllocations(): Promise<IpLease[]> {
    const rows = await this.store.db.selectFrom('ip_allocations').selectAll().orderBy('ip').execute();
    return rows.map(toLease);
  }

  async getAllocationForVm(vmId: string): Promise<IpLease | undefined> {
    const row = await this.store.db
      .selectFrom('ip_allocations')
      .selectAll()
      .where('vm_id', '=', vmId)
      .executeTakeFirst();
    return row ? toLease(row) : undefined;
  }

  async reclaim(live: ReadonlySet<string>): Promise<IpLease[]> {
    const gone = (await this.getAllocations()).filter(
      (l) => l.scalerName === this.scalerName && !live.has(l.vmId),
    );
    for (const l of gone) {
      // Keyed on both columns: a lease re-taken by a new VM meanwhile is not touched.
      await this.store.db
        .deleteFrom('ip_allocations')
        .where('ip', '=', l.ip)
        .where('vm_id', '=', l.vmId)
        .execute();
    }
    return gone;
  }
}

/** Leases in memory, for the disk guard's throw-away backend and for tests. */
export class InMemoryIpAllocator implements IpAllocator {
  private readonly pool: string[];
  private readonly leases = new Map<string, IpLease>();

  constructor(
    private readonly scalerName: string,
    cidr: string,
    gateway: string,
  ) {
    this.pool = usableAddresses(cidr, gateway);
  }

  allocate(vmId: string): Promise<IpLease> {
    const mine = this.leases.get(vmId);
    if (mine) return Promise.resolve(mine);
    const taken = new Set([...this.leases.values()].map((l) => l.ip));
    const ip = this.pool.find((a) => !taken.has(a));
    if (!ip)
      return Promise.reject(new IpPoolExhaustedError(`IP pool exhausted (${this.pool.length} addresses)`));
    const lease = { ip, vmId, scalerName: this.scalerName, tap: tapNameFor(vmId), mac: macFor(ip) };
    this.leases.set(vmId, lease);
    return Promise.resolve(lease);
  }

  release(vmId: string): Promise<void> {
    this.leases.delete(vmId);
    return Promise.resolve();
  }

  getAllocations(): Promise<IpLease[]> {
    return Promise.resolve([...this.leases.values()]);
  }

  getAllocationForVm(vmId: string): Promise<IpLease | undefined> {
    return Promise.resolve(this.leases.get(vmId));
  }

  reclaim(live: ReadonlySet<string>): Promise<IpLease[]> {
    const gone = [...this.leases.values()].filter((l) => !live.has(l.vmId));
    for (const l of gone) this.leases.delete(l.vmId);
    return Promise.resolve(gone);
  }
}
