import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fcApi, FirecrackerDriver } from '../../../../src/scaler/backends/firecracker/firecracker-driver.js';
import { waitGone } from '../../../../src/scaler/backends/firecracker/vm-process.js';
import { vmFiles } from '../../../../src/scaler/backends/firecracker/vm-dir.js';
import type { VmLaunch } from '../../../../src/scaler/backends/firecracker/vmm.js';
import { checkRequest, loadFirecrackerApi } from '../../../helpers/firecracker-api-check.js';
import { writeFakeVmmBins } from '../../../helpers/fake-vmm-bins.js';

type Logged = { method: string; path: string; body: Record<string, unknown>; errors: string[] };

const doc = loadFirecrackerApi();
let work: string;
let fakeBin: string;
let logFile: string;

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), 'kici-fc-'));
  const bins = await writeFakeVmmBins(work);
  logFile = bins.requestLog;
  fakeBin = bins.firecracker;
  // Firecracker opens the guest files when they are configured: they must exist.
  await mkdir(join(work, 'guest'));
  for (const f of ['vmlinux', 'initrd.cpio.gz', 'rootfs.ext4']) await writeFile(join(work, 'guest', f), f);
});
afterAll(() => rm(work, { recursive: true, force: true }));

async function vmIn(dir: string): Promise<VmLaunch> {
  await mkdir(join(dir, 'run'), { recursive: true });
  const f = vmFiles(dir);
  for (const p of [f.serialLog, f.vmmLog, f.overlay]) await writeFile(p, '');
  return {
    id: 'scaler-firecracker-0a1b2c3d',
    dir,
    kernel: join(work, 'guest/vmlinux'),
    initrd: join(work, 'guest/initrd.cpio.gz'),
    rootfs: join(work, 'guest/rootfs.ext4'),
    overlay: f.overlay,
    vcpus: 2,
    memMib: 512,
    bootArgs: 'console=ttyS0 rdinit=/init panic=-1 kici.net=10.0.0.2,10.0.0.1,24',
    tap: 'kici-0a1b2c3d',
    mac: '06:00:AC:00:00:02',
    ip: '10.0.0.2',
    guestEnv: "KICI_AGENT_TOKEN='secret'\n",
    serialLog: f.serialLog,
    vmmLog: f.vmmLog,
  };
}

async function requests(): Promise<Logged[]> {
  const text = await readFile(logFile, 'utf8').catch(() => '');
  return text
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as Logged);
}

describe('firecracker driver against a fake Firecracker that checks every request against the API document', () => {
  it('a full spawn and destroy: every request is one the document allows, in boot order', async () => {
    const dir = join(work, 'vm1', 'root');
    const driver = new FirecrackerDriver({
      firecrackerPath: fakeBin,
      logger: pino({ level: 'silent' }),
      hostEnv: process.env,
    });
    const vm = await vmIn(dir);
    const started = await driver.start(vm);
    expect(started.pid).toBeGreaterThan(0);
    await driver.stop({ id: vm.id, dir, pid: started.pid }, 5_000);
    expect(await waitGone(started.pid, 5_000)).toBe(true);
    const log = await requests();
    for (const r of log) expect(r.errors, `${r.method} ${r.path}`).toEqual([]);
    expect(log.map((r) => `${r.method} ${r.path}`)).toEqual([
      'PUT /machine-config',
      'PUT /boot-source',
      'PUT /drives/rootfs',
      'PUT /drives/overlay',
      'PUT /network-interfaces/eth0',
      'PUT /mmds/config',
      'PUT /mmds',
      'PUT /actions',
      'PUT /actions',
    ]);
    expect(log.map((r) => r.body.action_type).filter(Boolean)).toEqual(['InstanceStart', 'SendCtrlAltDel']);
    // Credentials travel in MMDS, never on the kernel command line.
    const boot = log.find((r) => r.path === '/boot-source')!.body;
    expect(String(boot.boot_args)).not.toContain('secret');
    const mmds = log.find((r) => r.path === '/mmds')!.body as {
      latest: { 'meta-data': Record<string, string> };
    };
    expect(mmds.latest['meta-data']['kici-env-file']).toContain("KICI_AGENT_TOKEN='secret'");
    const drives = log.filter((r) => r.path.startsWith('/drives/')).map((r) => r.body);
    expect(drives).toEqual([
      expect.objectContaining({ drive_id: 'rootfs', is_read_only: true, path_on_host: vm.rootfs }),
      expect.objectContaining({ drive_id: 'overlay', is_read_only: false, path_on_host: vm.overlay }),
    ]);
    // The fake's console output is the serial log the backend tails.
    expect(await readFile(vm.serialLog, 'utf8')).toContain('Linux version');
  });

  it('a malformed request over the socket is refused with the reason', async () => {
    await rm(logFile, { force: true });
    const dir = join(work, 'vm2', 'root');
    const driver = new FirecrackerDriver({
      firecrackerPath: fakeBin,
      logger: pino({ level: 'silent' }),
      hostEnv: process.env,
    });
    const vm = await vmIn(dir);
    const started = await driver.start(vm);
    const sock = vmFiles(dir).apiSocket;
    await expect(
      fcApi(sock, 'PUT', '/machine-config', { vcpu_count: '2', mem_size_mib: 512 }),
    ).rejects.toThrow(/400 body.vcpu_count: expected integer/);
    await expect(fcApi(sock, 'PUT', '/actions', { action_type: 'Reboot' })).rejects.toThrow(/not one of/);
    await driver.stop({ id: vm.id, dir, pid: started.pid }, 5_000);
    expect(await waitGone(started.pid, 5_000)).toBe(true);
  });

  it("the agent's acknowledgement empties MMDS: its token can no longer be fetched", async () => {
    await rm(logFile, { force: true });
    const dir = join(work, 'vm3', 'root');
    const driver = new FirecrackerDriver({
      firecrackerPath: fakeBin,
      logger: pino({ level: 'silent' }),
      hostEnv: process.env,
    });
    const vm = await vmIn(dir);
    const started = await driver.start(vm);
    const sock = vmFiles(dir).apiSocket;
    expect(await fcApi(sock, 'GET', '/mmds')).toContain("KICI_AGENT_TOKEN='secret'");
    await driver.configAcknowledged({ id: vm.id, dir });
    const after = await fcApi(sock, 'GET', '/mmds');
    expect(after).not.toContain('secret');
    expect(JSON.parse(after)).toEqual({ latest: { 'meta-data': {} } });
    await driver.stop({ id: vm.id, dir, pid: started.pid }, 5_000);
    expect(await waitGone(started.pid, 5_000)).toBe(true);
    const log = await requests();
    for (const r of log) expect(r.errors, `${r.method} ${r.path}`).toEqual([]);
    // The clearing request comes after InstanceStart (the agent can only ack a running VM).
    const calls = log.map((r) => `${r.method} ${r.path}`);
    expect(calls.lastIndexOf('PUT /mmds')).toBeGreaterThan(calls.indexOf('PUT /actions'));
  });

  it.each([
    ['missing required field', 'PUT', '/drives/rootfs', { drive_id: 'rootfs' }, /is_root_device: required/],
    [
      'wrong type',
      'PUT',
      '/drives/rootfs',
      { drive_id: 'rootfs', is_root_device: 'yes' },
      /expected boolean/,
    ],
    [
      'unknown field',
      'PUT',
      '/machine-config',
      { vcpu_count: 1, mem_size_mib: 128, turbo: true },
      /turbo: not a field/,
    ],
    ['enum', 'PUT', '/actions', { action_type: 'Reboot' }, /not one of/],
    ['unknown path', 'PUT', '/drive/rootfs', {}, /no such path/],
    ['method', 'DELETE', '/actions', undefined, /method not allowed/],
    ['path/body id mismatch', 'PUT', '/drives/rootfs', { drive_id: 'x', is_root_device: false }, /differs/],
    ['missing body', 'PUT', '/boot-source', undefined, /body required/],
  ])('the document check rejects a %s', (_what, method, path, body, re) => {
    const errors = checkRequest(doc, method, path, body);
    expect(errors.join('; ')).toMatch(re);
  });

  it('the document check accepts what the driver sends', () => {
    expect(
      checkRequest(doc, 'PUT', '/network-interfaces/eth0', {
        iface_id: 'eth0',
        host_dev_name: 'kici-1',
        guest_mac: '06:00:AC:00:00:02',
      }),
    ).toEqual([]);
    expect(checkRequest(doc, 'PUT', '/mmds', { latest: { 'meta-data': { a: 'b' } } })).toEqual([]);
  });
});
