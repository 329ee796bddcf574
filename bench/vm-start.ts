/**
 * VM job start (submit → the job's first step, through the VM scaler with the qemu driver) beside a
 * raw boot of the same kernel, initrd and rootfs with the same QEMU arguments to the agent's first
 * WebSocket message, measured in the same run and interleaved so that host load hits both alike.
 * Needs root, a network namespace of its own (run it under `nsenter --net=...`) and the guest
 * (KICI_TEST_VM_KERNEL / _INITRD / _ROOTFS, see scripts/build-vm-guest.sh).
 */
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { pino } from 'pino';
import { WebSocketServer } from 'ws';
import { stringify } from 'yaml';
import { NftAgentIsolation } from '../dist/net/nft-isolation.js';
import { createNftRunner } from '../dist/net/nft-runner.js';
import { Orchestrator } from '../dist/server/orchestrator.js';
import { commandRunner, HostNet } from '../dist/scaler/backends/firecracker/host-net.js';
import { QemuDriver } from '../dist/scaler/backends/firecracker/qemu-driver.js';
import { prepareVmDir, vmDirFor, vmFiles } from '../dist/scaler/backends/firecracker/vm-dir.js';
import { fmt, median, type BenchResult } from './stats.ts';

const exec = promisify(execFile);
const BRIDGE = 'vmb-br0';
const NET = '10.231.11';

/**
 * The orchestrator's table refuses every address of the VM subnet without rules of its own, so
 * the raw guest's address is admitted to its WebSocket port before the clock starts.
 */
const rawRules = new NftAgentIsolation({
  runner: createNftRunner(),
  table: 'vmb-t',
  gateway: `${NET}.1`,
  subnet: `${NET}.0/24`,
});

async function rawBoot(i: number, base: string, g: Guest, driver: QemuDriver, net: HostNet): Promise<number> {
  const wss = new WebSocketServer({ host: `${NET}.1`, port: 0 });
  await new Promise((r) => wss.once('listening', r));
  const port = (wss.address() as { port: number }).port;
  const id = `raw-${i}-0000abcd`;
  const dir = vmDirFor(base, id);
  const tap = `kici-raw${i}abc`.slice(0, 13);
  const ip = `${NET}.${200 + i}`;
  await prepareVmDir(dir, 256, commandRunner({ sudo: false, hostEnv: process.env }), {
    agentId: id,
    scalerName: 'raw',
    labelSet: [],
    ip,
    tap,
    startedAt: Date.now(),
  });
  await net.addTap(tap, BRIDGE);
  await rawRules.apply({
    agentId: id,
    scalerName: 'raw',
    ip,
    orchestrator: { address: `${NET}.1`, port },
    hostAccess: [],
    policy: undefined,
  });
  const f = vmFiles(dir);
  const t0 = performance.now();
  const first = new Promise<number>((res) =>
    wss.once('connection', (ws) => ws.once('message', () => res(performance.now()))),
  );
  const vm = await driver.start({
    id,
    dir,
    kernel: g.kernel,
    initrd: g.initrd,
    rootfs: g.rootfs,
    overlay: f.overlay,
    vcpus: 1,
    memMib: 512,
    bootArgs: `console=ttyS0 rdinit=/init panic=-1 reboot=t quiet kici.net=${ip},${NET}.1,24`,
    tap,
    mac: '06:00:AC:E7:0B:C8',
    ip,
    guestEnv: `KICI_ORCHESTRATOR_URL='ws://${NET}.1:${port}/ws'\nKICI_AGENT_ID='${id}'\nKICI_AGENT_TOKEN='raw'\nKICI_LABELS='linux'\nKICI_SCALER_MANAGED='1'\n`,
    serialLog: f.serialLog,
    vmmLog: f.vmmLog,
  });
  const ms = (await first) - t0;
  await driver.stop({ id, dir, pid: vm.pid }, 0);
  await net.deleteTap(tap);
  await rawRules.remove(ip);
  // The guest vanished without closing its connection (its TAP is gone), so nothing would ever end
  // that socket: it kept the bench process alive after the result was printed.
  for (const c of wss.clients) c.terminate();
  wss.close();
  return ms;
}

interface Guest {
  kernel: string;
  initrd: string;
  rootfs: string;
}

export async function benchVmStart(n = 3): Promise<BenchResult> {
  const g = {
    kernel: process.env.KICI_TEST_VM_KERNEL!,
    initrd: process.env.KICI_TEST_VM_INITRD!,
    rootfs: process.env.KICI_TEST_VM_ROOTFS!,
  };
  if (!g.kernel || !g.initrd || !g.rootfs)
    throw new Error('vm-start needs KICI_TEST_VM_KERNEL, _INITRD and _ROOTFS');
  const base = await mkdtemp(join(tmpdir(), 'kici-vmb-'));
  const cfgDir = await mkdtemp(join(tmpdir(), 'kici-vmb-cfg-'));
  const cfg = join(cfgDir, 'scalers.yaml');
  await writeFile(
    cfg,
    stringify({
      version: 1,
      firecracker: {
        cidr: `${NET}.0/24`,
        bridgeName: BRIDGE,
        gateway: `${NET}.1`,
        netmask: '255.255.255.0',
        table: 'vmb-t',
      },
      scalers: [
        {
          name: 'vmb',
          type: 'firecracker',
          vmm: 'qemu',
          kernelPath: g.kernel,
          initrdPath: g.initrd,
          chrootBaseDir: base,
          vcpuCount: 1,
          maxAgents: 1,
          labelSets: [
            { labels: ['linux', 'vmb'], rootfsPath: g.rootfs, memSizeMib: 512, overlayDriveSizeMib: 256 },
          ],
        },
      ],
    }),
  );
  const orch = await Orchestrator.start({
    port: 0,
    host: '0.0.0.0',
    dataDir: join(cfgDir, 'data'),
    scalerConfigPath: cfg,
    logger: pino({ level: 'silent' }),
  });
  const driver = new QemuDriver({
    binary: 'qemu-system-x86_64',
    accel: 'tcg',
    logger: pino({ level: 'silent' }),
    hostEnv: process.env,
  });
  const net = new HostNet(commandRunner({ sudo: false, hostEnv: process.env }));
  const api = async <T>(method: string, path: string, body?: unknown): Promise<T> => {
    const res = await fetch(`${orch.url}${path}`, {
      method,
      headers: { authorization: `Bearer ${orch.adminToken}`, 'content-type': 'application/json' },
      ...(body ? { body: JSON.stringify(body) } : {}),
    });
    return (await res.json()) as T;
  };
  const raw: number[] = [];
  const ours: number[] = [];
  try {
    for (let i = 0; i < n; i++) {
      raw.push(await rawBoot(i, base, g, driver, net));
      const t0 = Date.now();
      const run = await api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
        jobs: { b: { runsOn: ['linux', 'vmb'], steps: [{ run: 'true' }] } },
      });
      const id = run.jobs[0]!.id;
      for (;;) {
        const j = await api<{ state: string; startedAt: string | null }>('GET', `/api/v1/jobs/${id}`);
        if (j.startedAt) {
          ours.push(Date.parse(j.startedAt) - t0);
          break;
        }
        if (['failed', 'cancelled', 'timed-out', 'no-backend'].includes(j.state))
          throw new Error(`bench job ${j.state}`);
        await new Promise((r) => setTimeout(r, 20));
      }
      // Let the VM go before the next raw boot, so the two never share the CPU.
      while (orch.scaler!.entries().length || orch.scaler!.teardownsInFlight)
        await new Promise((r) => setTimeout(r, 100));
    }
  } finally {
    await orch.stop();
    await exec('ip', ['link', 'del', 'dev', BRIDGE]).catch(() => {});
    await exec('nft', ['delete', 'table', 'inet', 'vmb-t']).catch(() => {});
    await rm(base, { recursive: true, force: true });
    await rm(cfgDir, { recursive: true, force: true });
  }
  const r = median(ours) / median(raw);
  return {
    name: 'VM job start (qemu microvm, TCG): submit -> first step',
    value: median(ours),
    unit: 'ms',
    ratio: r,
    target: 'ratio <= 1.2 against a raw boot of the same guest to the agent first message',
    pass: r <= 1.2,
    detail: `ours ${ours.map((x) => fmt(x, 0)).join(', ')} ms; raw boot ${raw.map((x) => fmt(x, 0)).join(', ')} ms (median ${fmt(median(raw), 0)})`,
  };
}
