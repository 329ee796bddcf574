/**
 * TAPs in the VM orphan sweep. A running VM whose lease is missing keeps its TAP: its own record
 * names it. A sweep that cannot see every scaler's leases (built from the config alone, the
 * orchestrator down) deletes no TAP for lacking a lease, only those its dead VMs' records name.
 */
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { firecrackerNetworkSchema, scalerFileSchema } from '../../../../src/config/index.js';
import { VmScalerBackend } from '../../../../src/scaler/backends/firecracker/backend.js';
import { HostNet } from '../../../../src/scaler/backends/firecracker/host-net.js';
import { InMemoryIpAllocator } from '../../../../src/scaler/backends/firecracker/ip-allocator.js';
import type { VmmDriver } from '../../../../src/scaler/backends/firecracker/vmm.js';

const LIVE_TAP = 'kici-0a0a0a0a';
const STRAY_TAP = 'kici-0b0b0b0b';

let base: string;
beforeAll(async () => {
  base = await mkdtemp(join(tmpdir(), 'kici-sweep-tap-'));
});
afterAll(() => rm(base, { recursive: true, force: true }));

/** A live VM (this test's own process stands for its VMM) whose record names LIVE_TAP. */
async function liveVm(): Promise<void> {
  const dir = join(base, 'firecracker', 'tappy-vm-live', 'root');
  await mkdir(dir, { recursive: true });
  await writeFile(join(dir, 'vmm.pid'), String(process.pid));
  const record = {
    agentId: 'tappy-vm-live',
    scalerName: 'tappy',
    labelSet: ['vm'],
    ip: '172.16.0.9',
    tap: LIVE_TAP,
    startedAt: 1,
  };
  await writeFile(join(dir, 'vm.json'), JSON.stringify(record));
}

/** A backend whose host has LIVE_TAP and STRAY_TAP; the TAPs it deletes are collected. */
function backendOn(sweepsUnleasedTaps: boolean | undefined) {
  const network = firecrackerNetworkSchema.parse({});
  const [entry] = scalerFileSchema.parse({
    version: 1,
    scalers: [
      {
        name: 'tappy',
        type: 'firecracker',
        vmm: 'qemu',
        kernelPath: '/k',
        chrootBaseDir: base,
        maxAgents: 1,
        labelSets: [{ labels: ['vm'], rootfsPath: '/r' }],
      },
    ],
  }).scalers;
  const deleted: string[] = [];
  const hostNet = new HostNet((_cmd, args) => {
    if (args[0] === '-o') return Promise.resolve(`7: ${LIVE_TAP}: <UP>\n8: ${STRAY_TAP}: <UP>\n`);
    if (args[1] === 'del') deleted.push(args[3]!);
    return Promise.resolve('');
  });
  const driver: VmmDriver = {
    kind: 'qemu',
    describe: () => 'none',
    start: () => Promise.reject(new Error('not in this test')),
    stop: () => Promise.resolve(),
    owns: () => Promise.resolve(false),
  };
  const backend = new VmScalerBackend({
    entry: entry!,
    network,
    driver,
    allocator: new InMemoryIpAllocator('tappy', network.cidr, network.gateway),
    hostNet,
    run: () => Promise.resolve(''),
    isolation: undefined,
    logger: pino({ level: 'silent' }),
    resolvePath: (p) => p,
    ...(sweepsUnleasedTaps === undefined ? {} : { sweepsUnleasedTaps }),
  });
  return { backend, deleted };
}

describe('VM orphan sweep with no leases', () => {
  it("keeps a running VM's TAP (named by its record) and deletes a TAP no running VM names", async () => {
    await liveVm();
    const { backend, deleted } = backendOn(undefined);
    const listed: string[] = [];
    await backend.cleanupOrphans(undefined, { dryRun: true, onItem: (i) => listed.push(i.ref) });
    expect(listed).toEqual([STRAY_TAP]);
    expect(await backend.cleanupOrphans()).toBe(1);
    expect(deleted).toEqual([STRAY_TAP]);
  });

  it('a sweep that cannot see every lease leaves unleased TAPs alone, and removes only what its dead VMs name', async () => {
    await liveVm();
    const dead = join(base, 'firecracker', 'tappy-vm-dead', 'root');
    await mkdir(dead, { recursive: true });
    await writeFile(join(dead, 'vmm.pid'), '999999999');
    const record = {
      agentId: 'tappy-vm-dead',
      scalerName: 'tappy',
      labelSet: ['vm'],
      ip: '172.16.0.8',
      tap: 'kici-0c0c0c0c',
      startedAt: 1,
    };
    await writeFile(join(dead, 'vm.json'), JSON.stringify(record));
    const { backend, deleted } = backendOn(false);
    expect(await backend.cleanupOrphans()).toBe(1);
    expect(deleted).toEqual(['kici-0c0c0c0c']);
  });
});
