import { access, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { firecrackerNetworkSchema, scalerFileSchema } from '../../../../src/config/index.js';
import type { AgentIsolation, AgentRuleRequest } from '../../../../src/net/isolation.js';
import { applyCommands, chainNames } from '../../../../src/net/nft-rules.js';
import { VmScalerBackend } from '../../../../src/scaler/backends/firecracker/backend.js';
import { fcApi, FirecrackerDriver } from '../../../../src/scaler/backends/firecracker/firecracker-driver.js';
import { HostNet } from '../../../../src/scaler/backends/firecracker/host-net.js';
import { InMemoryIpAllocator, tapNameFor } from '../../../../src/scaler/backends/firecracker/ip-allocator.js';
import { vmDirFor, vmFiles } from '../../../../src/scaler/backends/firecracker/vm-dir.js';
import { pidAlive, waitGone } from '../../../../src/scaler/backends/firecracker/vm-process.js';
import type { SpawnContext } from '../../../../src/scaler/types.js';
import { writeFakeVmmBins, type FakeVmmBins } from '../../../helpers/fake-vmm-bins.js';
import { chainRules, evaluate } from '../../../helpers/nft-eval.js';
import { spawnContext } from '../../../helpers/spawn-context.js';

/**
 * The VM backend with the firecracker driver under the (fake) jailer, everything but the host's
 * `ip` commands real: what reaches the guest (MMDS), the firewall request, the withdrawal of the
 * config after the agent registers, and a teardown that leaves no chroot.
 */
type Logged = { method: string; path: string; errors: string[] };
const JAIL_ID = 65534;
const network = firecrackerNetworkSchema.parse({});
let work: string;
let bins: FakeVmmBins;
let guest: string;

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), 'kici-fcb-'));
  bins = await writeFakeVmmBins(work);
  guest = join(work, 'guest');
  await mkdir(guest);
  for (const f of ['vmlinux', 'rootfs.ext4']) await writeFile(join(guest, f), f);
});
afterAll(() => rm(work, { recursive: true, force: true }));

function setup(base: string) {
  const [entry] = scalerFileSchema.parse({
    version: 1,
    scalers: [
      {
        name: 'fcb',
        type: 'firecracker',
        firecrackerPath: bins.firecracker,
        jailerPath: bins.jailer,
        uid: JAIL_ID,
        gid: JAIL_ID,
        kernelPath: join(guest, 'vmlinux'),
        chrootBaseDir: base,
        maxAgents: 2,
        extraHosts: ['db.internal:10.9.8.7', 'host.docker.internal:host-gateway'],
        labelSets: [{ labels: ['vm'], rootfsPath: join(guest, 'rootfs.ext4'), overlayDriveSizeMib: 1 }],
      },
    ],
  }).scalers;
  const commands: string[][] = [];
  // Host commands (ip, mkfs.ext4) are recorded, not run: no TAP or bridge is made on this host.
  const run = (cmd: string, args: string[]) => (commands.push([cmd, ...args]), Promise.resolve(''));
  const applied: AgentRuleRequest[] = [];
  const removed: string[] = [];
  const isolation: AgentIsolation = {
    apply: (r) => (applied.push(r), Promise.resolve()),
    remove: (ip) => (removed.push(ip), Promise.resolve()),
    reapStale: () => Promise.resolve(0),
    listRuled: () => Promise.resolve([]),
  };
  const logger = pino({ level: 'silent' });
  const backend = new VmScalerBackend({
    entry: entry!,
    network,
    driver: new FirecrackerDriver({
      firecrackerPath: bins.firecracker,
      jailer: { path: bins.jailer, uid: JAIL_ID, gid: JAIL_ID, chrootBase: base },
      logger,
      hostEnv: process.env,
    }),
    allocator: new InMemoryIpAllocator('fcb', network.cidr, network.gateway),
    hostNet: new HostNet(run),
    run,
    isolation,
    logger,
    resolvePath: (p) => p,
    hostEnv: {},
    hostServices: [`${network.gateway}:9000`],
  });
  return { backend, commands, applied, removed };
}

const ctxFor = (agentId: string): SpawnContext =>
  spawnContext(agentId, ['vm'], {
    orchestratorUrl: 'ws://127.0.0.1:8080',
    auth: { kind: 'token', token: 'tok-secret-123' },
  });

async function mmdsEnv(sock: string): Promise<string> {
  const m = JSON.parse(await fcApi(sock, 'GET', '/mmds')) as {
    latest?: { 'meta-data'?: Record<string, string> };
  };
  return m.latest?.['meta-data']?.['kici-env-file'] ?? '';
}

describe('VM backend, firecracker driver under the jailer', () => {
  it('extraHosts and host services reach the VM; the token is withdrawn on registration; teardown removes the chroot', async () => {
    const base = join(work, 'jail');
    const { backend, applied, removed, commands } = setup(base);
    const id = 'fcb-vm-0a1b2c3d';
    const agent = await backend.spawn(ctxFor(id));
    const pid = Number(agent.backendRef);
    const dir = vmDirFor(base, id);
    const sock = vmFiles(dir).apiSocket;

    // extraHosts as /etc/hosts lines in the guest's config, host-gateway as the bridge gateway.
    const env = await mmdsEnv(sock);
    expect(env).toContain(`KICI_GUEST_HOSTS='10.9.8.7 db.internal\n${network.gateway} host.docker.internal'`);
    expect(env).toContain("KICI_AGENT_TOKEN='tok-secret-123'");

    // The host services are allowed in the VM's rules, as for containers; a neighbouring port is not.
    expect(applied[0]!.hostAccess).toEqual([`${network.gateway}:9000`]);
    const cmds = applyCommands(applied[0]!, {
      table: network.table,
      gateway: network.gateway,
      subnet: network.cidr,
    });
    const input = chainRules(cmds, chainNames(applied[0]!.ip).input);
    expect(evaluate(input, { daddr: network.gateway, proto: 'tcp', dport: 9000 })).toBe('accept');
    expect(evaluate(input, { daddr: network.gateway, proto: 'tcp', dport: 9001 })).not.toBe('accept');

    // Registering is the agent's acknowledgement: MMDS no longer holds its token.
    backend.markRegistered(id);
    for (let i = 0; i < 50 && (await mmdsEnv(sock)).includes('tok-secret'); i++)
      await new Promise((r) => setTimeout(r, 50));
    expect(JSON.stringify(JSON.parse(await fcApi(sock, 'GET', '/mmds')))).not.toContain('tok-secret');

    await backend.destroy(id, { reason: 'job-complete' });
    expect(await waitGone(pid, 5_000)).toBe(true);
    expect(await pidAlive(pid)).toBe(false);
    await expect(access(join(base, 'firecracker', id))).rejects.toThrow();
    expect(removed).toEqual([applied[0]!.ip]);
    expect(commands.map((c) => c.join(' '))).toContain(`ip link del dev ${tapNameFor(id)}`);

    const log = (await readFile(bins.requestLog, 'utf8'))
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as Logged);
    for (const r of log) expect(r.errors, `${r.method} ${r.path}`).toEqual([]);
    expect(log.filter((r) => r.method !== 'GET').map((r) => `${r.method} ${r.path}`)).toEqual([
      'PUT /machine-config',
      'PUT /boot-source',
      'PUT /drives/rootfs',
      'PUT /drives/overlay',
      'PUT /network-interfaces/eth0',
      'PUT /mmds/config',
      'PUT /mmds',
      'PUT /actions',
      'PUT /mmds',
      'PUT /actions',
    ]);
  });
});
