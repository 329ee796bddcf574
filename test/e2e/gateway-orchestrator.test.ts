/**
 * The orchestrator opens the agent-only gateway listener itself: with its API on loopback and a VM
 * scaler whose bridge gateway is 127.0.0.2 (the `lo` device stands in for the bridge; no VM is
 * started), /ws is served on the gateway and the API is not; a reload that puts the scaler behind
 * another gateway moves the listener; stop closes it. Listening on every address opens none.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import WebSocket from 'ws';
import { afterEach, describe, expect, it } from 'vitest';
import type { AgentIsolation } from '../../src/net/isolation.js';
import type { VmmDriver } from '../../src/scaler/backends/firecracker/vmm.js';
import { startTestOrchestrator, type TestOrchestrator } from '../helpers/orchestrator.js';

const noVms: VmmDriver = {
  kind: 'qemu',
  describe: () => 'none (this test starts no VM)',
  start: () => Promise.reject(new Error('this test starts no VM')),
  stop: () => Promise.resolve(),
  owns: () => Promise.resolve(false),
};
const noRules: AgentIsolation = {
  apply: () => Promise.resolve(),
  remove: () => Promise.resolve(),
  reapStale: () => Promise.resolve(0),
  listRuled: () => Promise.resolve([]),
};

let t: TestOrchestrator | undefined;
const dirs: string[] = [];
afterEach(async () => {
  await t?.stop();
  t = undefined;
  for (const d of dirs.splice(0)) await rm(d, { recursive: true, force: true });
});

async function vmConfig(gateway: string, name = 'vm') {
  const base = await mkdtemp(join(tmpdir(), 'kici-gwo-'));
  dirs.push(base);
  await writeFile(join(base, 'vmlinux'), '');
  await writeFile(join(base, 'rootfs.ext4'), '');
  return {
    version: 1,
    firecracker: { bridgeName: 'lo', cidr: '127.0.0.0/24', gateway, netmask: '255.255.255.0' },
    scalers: [
      {
        name,
        type: 'firecracker',
        vmm: 'qemu',
        // Never run: the driver below stands in for the hypervisor.
        qemuPath: '/bin/true',
        kernelPath: join(base, 'vmlinux'),
        chrootBaseDir: base,
        maxAgents: 1,
        labelSets: [{ labels: ['vm'], rootfsPath: join(base, 'rootfs.ext4') }],
      },
    ],
  };
}

const status = (url: string) =>
  fetch(url).then(
    (r) => String(r.status),
    (e: Error & { cause?: { code?: string } }) => e.cause?.code ?? e.message,
  );

function wsOpens(url: string): Promise<boolean> {
  return new Promise((resolve) => {
    const ws = new WebSocket(url);
    ws.once('open', () => {
      ws.terminate();
      resolve(true);
    });
    ws.once('error', () => resolve(false));
  });
}

const start = async (host: string, config: unknown) =>
  (t = await startTestOrchestrator({
    host,
    config,
    backendDeps: {
      vmm: noVms,
      isolationFor: () => noRules,
      vmStatfs: async () => ({ bavail: 1e9, bsize: 4096 }),
    },
    startupDiskGuard: { statfs: async () => ({ bavail: 1e9, bsize: 4096 }) },
  }));

describe('the orchestrator and its gateway listener', () => {
  it('serves /ws on the gateway, keeps the API on loopback, follows a reload and closes on stop', async () => {
    const o = await start('127.0.0.1', await vmConfig('127.0.0.2'));
    const port = new URL(o.orch.url).port;
    expect(o.orch.gatewayAddresses()).toEqual(['127.0.0.2']);
    expect(await wsOpens(`ws://127.0.0.2:${port}/ws`)).toBe(true);
    expect(await status(`http://127.0.0.2:${port}/api/v1/jobs`)).toBe('404');
    expect(await status(`http://127.0.0.2:${port}/metrics`)).toBe('404');
    expect((await o.api('GET', '/api/v1/jobs')).status).toBe(200);

    // The VM scaler is replaced by one behind another gateway: the listener follows.
    await writeFile(o.orch.opts.scalerConfigPath!, JSON.stringify(await vmConfig('127.0.0.3', 'vm2')));
    const res = await o.orch.reload();
    expect(res.result, JSON.stringify(res)).not.toBe('rejected');
    expect(o.orch.gatewayAddresses()).toEqual(['127.0.0.3']);
    expect(await wsOpens(`ws://127.0.0.3:${port}/ws`)).toBe(true);
    expect(await status(`http://127.0.0.2:${port}/ws`)).toBe('ECONNREFUSED');

    await o.stop();
    t = undefined;
    expect(await status(`http://127.0.0.3:${port}/ws`)).toBe('ECONNREFUSED');
  });

  it('opens none when it listens on every address', async () => {
    const o = await start('0.0.0.0', await vmConfig('127.0.0.2'));
    expect(o.orch.gatewayAddresses()).toEqual([]);
  });
});
