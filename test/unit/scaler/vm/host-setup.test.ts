import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { firecrackerNetworkSchema } from '../../../../src/config/index.js';
import type { NftCommand, NftObject } from '../../../../src/net/nft-runner.js';
import {
  checkNetwork,
  IP_FORWARD,
  NAT_CHAIN,
  networkDiagnoseRow,
  provisionHost,
  teardownHost,
  verifyHost,
  type HostPorts,
  type VmHostNeeds,
} from '../../../../src/scaler/backends/firecracker/host-setup.js';

/**
 * A small model of the host: links with addresses, nftables tables with chains and rules, the
 * forwarding switch and directories. It answers the same `ip -j` and `nft -j` shapes as the real
 * tools, and refuses what they refuse (a second bridge of one name, a missing table).
 */
class FakeHost {
  links = new Map<string, { kind: string; up: boolean; addrs: string[]; master?: string; mac?: string }>();
  tables = new Map<
    string,
    { chains: Map<string, Record<string, unknown>>; rules: Record<string, unknown>[] }
  >();
  forward = '0';
  dirs = new Set<string>();
  files = new Map<string, string>();

  snapshot(): string {
    return JSON.stringify({
      links: [...this.links].sort(),
      tables: [...this.tables.keys()].sort(),
      chains: [...this.tables].map(([n, t]) => [n, [...t.chains.keys()].sort()]),
      forward: this.forward,
      dirs: [...this.dirs].sort(),
    });
  }

  ports(): HostPorts {
    return {
      run: async (cmd, args) => this.ip(cmd, args),
      nft: {
        run: async (commands) => this.nft(commands),
        list: async (args) => {
          const t = this.tables.get(args[2]!);
          if (!t) throw new Error(`Error: No such file or directory; table inet ${args[2]}`);
          return [
            ...[...t.chains.values()].map((c) => ({ chain: c })),
            ...t.rules.map((r) => ({ rule: r })),
          ] as NftObject[];
        },
      },
      fs: {
        access: async (p) => p === '/dev/kvm' || p.startsWith('/opt/fc/') || this.dirs.has(p),
        isDir: async (p) => this.dirs.has(p),
        readText: async (p) => (p === IP_FORWARD ? `${this.forward}\n` : this.files.get(p)),
        writeText: async (p, s) => void this.files.set(p, s),
        remove: async (p) => void this.files.delete(p),
        mkdirp: async (p) => !this.dirs.has(p) && !!this.dirs.add(p),
        rmdirIfEmpty: async (p) => this.dirs.delete(p) || true,
      },
    };
  }

  private ip(cmd: string, a: string[]): string {
    if (cmd === 'sysctl') {
      this.forward = a[1]!.split('=')[1]!;
      return '';
    }
    const s = a.join(' ');
    let m: RegExpExecArray | null;
    if ((m = /^-j -d link show dev (\S+)$/.exec(s))) {
      const l = this.links.get(m[1]!);
      if (!l) throw new Error(`Device "${m[1]}" does not exist.`);
      return JSON.stringify([{ flags: l.up ? ['UP'] : [], linkinfo: { info_kind: l.kind } }]);
    }
    if ((m = /^-j -4 addr show dev (\S+)$/.exec(s)))
      return JSON.stringify([
        {
          addr_info: this.links
            .get(m[1]!)!
            .addrs.map((x) => ({ local: x.split('/')[0], prefixlen: +x.split('/')[1]! })),
        },
      ]);
    if ((m = /^link add (\S+) (?:address (\S+) )?type bridge$/.exec(s))) {
      if (this.links.has(m[1]!)) throw new Error('RTNETLINK answers: File exists');
      this.links.set(m[1]!, { kind: 'bridge', up: false, addrs: [], mac: m[2] });
      return '';
    }
    if ((m = /^addr add (\S+) dev (\S+)$/.exec(s))) {
      this.links.get(m[2]!)!.addrs.push(m[1]!);
      return '';
    }
    if ((m = /^link set (\S+) up$/.exec(s))) {
      this.links.get(m[1]!)!.up = true;
      return '';
    }
    if ((m = /^addr del (\S+) dev (\S+)$/.exec(s))) {
      const l = this.links.get(m[2]!)!;
      l.addrs = l.addrs.filter((x) => x !== m![1]);
      return '';
    }
    if ((m = /^-o link show master (\S+)$/.exec(s)))
      return [...this.links]
        .filter(([, l]) => l.master === m![1])
        .map(([n]) => `9: ${n}: <UP>`)
        .join('\n');
    if ((m = /^link del dev (\S+)$/.exec(s))) {
      this.links.delete(m[1]!);
      return '';
    }
    throw new Error(`fake ip: ${s}`);
  }

  private nft(commands: NftCommand[]): void {
    for (const c of commands) {
      const [verb, body] = Object.entries(c)[0] as [string, Record<string, Record<string, unknown>>];
      const [what, o] = Object.entries(body)[0]!;
      const tname = (what === 'table' ? o.name : o.table) as string;
      if (verb === 'add' && what === 'table') {
        if (!this.tables.has(tname)) this.tables.set(tname, { chains: new Map(), rules: [] });
        continue;
      }
      const t = this.tables.get(tname);
      if (!t) throw new Error(`Error: No such file or directory (table ${tname})`);
      if (verb === 'delete' && what === 'table') this.tables.delete(tname);
      else if (verb === 'add' && what === 'chain') t.chains.set(o.name as string, o);
      else if (verb === 'delete' && what === 'chain') t.chains.delete(o.name as string);
      else if (verb === 'flush' && what === 'chain') t.rules = t.rules.filter((r) => r.chain !== o.name);
      else if (verb === 'add' && what === 'rule') t.rules.push(o);
    }
  }
}

const network = firecrackerNetworkSchema.parse({
  bridgeName: 'kici-br9',
  table: 'kici9',
  cidr: '10.9.0.0/24',
  gateway: '10.9.0.1',
});
const needs: VmHostNeeds[] = [
  {
    scaler: 'vm',
    vmm: 'firecracker',
    binaries: [
      { what: 'firecracker', path: '/opt/fc/firecracker' },
      { what: 'jailer', path: '/missing/jailer' },
    ],
    kernelPath: '/opt/fc/vmlinux',
    chrootBaseDir: '/srv/jailer-9',
  },
];
const statusOf = (rows: { name: string; status: string }[]) =>
  Object.fromEntries(rows.map((r) => [r.name, r.status]));

describe('firecracker host set-up', () => {
  it('verify on a bare host: FAIL for the bridge, the table and a missing binary; WARN for forwarding and the chroot', async () => {
    const host = new FakeHost();
    const rows = await verifyHost(host.ports(), network, needs);
    expect(statusOf(rows)).toEqual({
      'bridge:kici-br9': 'FAIL',
      'firecracker-network:kici9': 'FAIL',
      'ip-forward': 'WARN',
      kvm: 'PASS',
      'firecracker:vm': 'PASS',
      'jailer:vm': 'FAIL',
      'kernel:vm': 'PASS',
      'chroot:vm': 'WARN',
    });
    expect(rows.find((r) => r.name === 'bridge:kici-br9')?.fix).toMatch(/kici-admin firecracker provision/);
  });

  it('provision makes the network rows pass, a second provision makes nothing, teardown restores the host', async () => {
    const host = new FakeHost();
    const before = host.snapshot();
    const first = await provisionHost(host.ports(), network, needs, {});
    expect(first.record).toEqual({
      bridge: 'kici-br9',
      table: 'kici9',
      ipForward: true,
      chrootDirs: ['/srv/jailer-9'],
    });
    // Created with a set address, from the gateway: its ports cannot move it.
    expect(host.links.get('kici-br9')?.mac).toBe('0a:58:0a:09:00:01');
    const rows = statusOf(await verifyHost(host.ports(), network, needs));
    expect(rows).toMatchObject({
      'bridge:kici-br9': 'PASS',
      'firecracker-network:kici9': 'PASS',
      'ip-forward': 'PASS',
      'chroot:vm': 'PASS',
    });
    const after = host.snapshot();
    const second = await provisionHost(host.ports(), network, needs, first.record);
    expect(second.made).toEqual([]);
    expect(second.record).toEqual(first.record);
    expect(host.snapshot()).toBe(after);
    await teardownHost(host.ports(), second.record);
    expect(host.snapshot()).toBe(before);
  });

  it('teardown refuses while interfaces are attached to the bridge, and removes nothing', async () => {
    const host = new FakeHost();
    const { record } = await provisionHost(host.ports(), network, needs, {});
    host.links.set('kici-0000abcd', { kind: 'tun', up: true, addrs: [], master: 'kici-br9' });
    const mid = host.snapshot();
    await expect(teardownHost(host.ports(), record)).rejects.toThrow(/still has 1 interface/);
    expect(host.snapshot()).toBe(mid);
  });

  it('whatever was there before, provision then teardown leaves exactly that', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.record({
          bridge: fc.boolean(),
          addr: fc.boolean(),
          table: fc.boolean(),
          nat: fc.boolean(),
          forward: fc.boolean(),
          dir: fc.boolean(),
        }),
        async (pre) => {
          const host = new FakeHost();
          if (pre.bridge)
            host.links.set('kici-br9', { kind: 'bridge', up: true, addrs: pre.addr ? ['10.9.0.1/24'] : [] });
          if (pre.table) {
            host.tables.set('kici9', {
              chains: new Map([
                ['forward', { name: 'forward' }],
                ['input', { name: 'input' }],
              ]),
              rules: [],
            });
            if (pre.nat) host.tables.get('kici9')!.chains.set(NAT_CHAIN, { name: NAT_CHAIN, type: 'nat' });
          }
          if (pre.forward) host.forward = '1';
          if (pre.dir) host.dirs.add('/srv/jailer-9');
          const before = host.snapshot();
          const { record } = await provisionHost(host.ports(), network, needs, {});
          const net = statusOf(await verifyHost(host.ports(), network, needs));
          expect([net['bridge:kici-br9'], net['firecracker-network:kici9']]).toEqual(['PASS', 'PASS']);
          await teardownHost(host.ports(), record);
          expect(host.snapshot()).toBe(before);
        },
      ),
      { numRuns: 64 },
    );
  });

  it("diagnose's firecracker-network row: the worst of the bridge and table rows, with the fix", async () => {
    const host = new FakeHost();
    const bare = networkDiagnoseRow(await checkNetwork(host.ports(), network));
    expect(bare.name).toBe('firecracker-network');
    expect(bare.status).toBe('FAIL');
    expect(bare.message).toMatch(
      /bridge kici-br9 does not exist \(fix: run kici-admin firecracker provision/,
    );
    expect(bare.message).toMatch(/table inet kici9 is missing/);
    await provisionHost(host.ports(), network, needs, {});
    host.tables.get('kici9')!.rules = host.tables.get('kici9')!.rules.filter((r) => r.chain !== NAT_CHAIN);
    const noNat = networkDiagnoseRow(await checkNetwork(host.ports(), network));
    expect(noNat).toMatchObject({
      status: 'FAIL',
      message: expect.stringMatching(/^table inet kici9 lacks NAT/),
    });
    await provisionHost(host.ports(), network, needs, {});
    expect(networkDiagnoseRow(await checkNetwork(host.ports(), network)).status).toBe('PASS');
  });
});
