import { access, chmod, chown, link, mkdir, mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  FirecrackerDriver,
  type JailerOptions,
} from '../../../../src/scaler/backends/firecracker/firecracker-driver.js';
import { vmDirFor, vmFiles } from '../../../../src/scaler/backends/firecracker/vm-dir.js';
import { waitGone } from '../../../../src/scaler/backends/firecracker/vm-process.js';
import type { VmLaunch } from '../../../../src/scaler/backends/firecracker/vmm.js';
import { writeFakeVmmBins, type FakeVmmBins } from '../../../helpers/fake-vmm-bins.js';

type Logged = { method: string; path: string; body: Record<string, unknown>; errors: string[] };

/** The uid:gid the jailer drops to: nobody, so file access is really checked (the tests run as root). */
const JAIL_ID = 65534;
let work: string;
let bins: FakeVmmBins;
let guest: string;

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), 'kici-jail-'));
  bins = await writeFakeVmmBins(work);
  guest = join(work, 'guest');
  await mkdir(guest);
  for (const f of ['vmlinux', 'initrd.cpio.gz', 'rootfs.ext4']) await writeFile(join(guest, f), f);
});
afterAll(() => rm(work, { recursive: true, force: true }));

const lines = async <T>(file: string): Promise<T[]> =>
  (await readFile(file, 'utf8').catch(() => ''))
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as T);

/** A VM directory as the backend prepares it: overlay, logs, run/ (root-owned, 0600/0700). */
async function vmIn(base: string, id: string): Promise<VmLaunch> {
  const dir = vmDirFor(base, id);
  await mkdir(join(dir, 'run'), { recursive: true, mode: 0o700 });
  const f = vmFiles(dir);
  for (const p of [f.serialLog, f.vmmLog, f.overlay]) await writeFile(p, '', { mode: 0o600 });
  return {
    id,
    dir,
    kernel: join(guest, 'vmlinux'),
    initrd: join(guest, 'initrd.cpio.gz'),
    rootfs: join(guest, 'rootfs.ext4'),
    overlay: f.overlay,
    vcpus: 1,
    memMib: 256,
    bootArgs: 'console=ttyS0 kici.net=10.0.0.2,10.0.0.1,24',
    tap: 'kici-0a1b2c3d',
    mac: '06:00:AC:00:00:02',
    ip: '10.0.0.2',
    guestEnv: "KICI_AGENT_TOKEN='secret'\n",
    serialLog: f.serialLog,
    vmmLog: f.vmmLog,
  };
}

const jailOf = (base: string, netns?: string): JailerOptions => ({
  path: bins.jailer,
  uid: JAIL_ID,
  gid: JAIL_ID,
  chrootBase: base,
  netns,
});

describe('firecracker under the jailer (fake jailer checking its documented CLI)', () => {
  it('runs the jailer with its flags, puts the guest files in the chroot and talks to the socket there', async () => {
    const base = join(work, 'srv-jailer');
    const vm = await vmIn(base, 'scaler-fc-0a1b2c3d');
    // Any netns file will do for the fake, which only checks that it exists.
    const driver = new FirecrackerDriver({
      firecrackerPath: bins.firecracker,
      jailer: jailOf(base, '/proc/self/ns/net'),
      logger: pino({ level: 'silent' }),
      hostEnv: process.env,
    });
    const started = await driver.start(vm);
    const [argv] = await lines<string[]>(bins.jailerLog);
    expect(argv).toEqual([
      ...['--id', vm.id, '--exec-file', bins.firecracker, '--uid', String(JAIL_ID), '--gid', String(JAIL_ID)],
      ...['--chroot-base-dir', base, '--netns', '/proc/self/ns/net'],
      ...['--', '--api-sock', '/run/firecracker.socket'],
    ]);
    // The chroot is the VM directory: guest files linked in, owned by the jail's uid.
    for (const f of ['kernel', 'initrd', 'rootfs.ext4', 'overlay.ext4', 'firecracker']) {
      await access(join(vm.dir, f));
    }
    expect((await stat(join(vm.dir, 'overlay.ext4'))).uid).toBe(JAIL_ID);
    expect((await stat(join(vm.dir, 'run'))).uid).toBe(JAIL_ID);
    // The shared images every VM boots stay root's and 0644, in the jail and at their source.
    for (const [inJail, src] of [
      ['kernel', 'vmlinux'],
      ['initrd', 'initrd.cpio.gz'],
      ['rootfs.ext4', 'rootfs.ext4'],
    ] as const) {
      for (const p of [join(vm.dir, inJail), join(guest, src)]) {
        const st = await stat(p);
        expect([p, st.uid, st.mode & 0o777]).toEqual([p, 0, 0o644]);
      }
    }
    expect(await driver.owns(started.pid, vm.dir)).toBe(true);
    await driver.configAcknowledged({ id: vm.id, dir: vm.dir });
    await driver.stop({ id: vm.id, dir: vm.dir, pid: started.pid }, 5_000);
    expect(await waitGone(started.pid, 5_000)).toBe(true);

    const log = await lines<Logged>(bins.requestLog);
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
      'PUT /mmds',
      'PUT /actions',
    ]);
    // Paths as firecracker sees them from inside its root.
    expect(log[1]!.body).toMatchObject({ kernel_image_path: '/kernel', initrd_path: '/initrd' });
    expect(log[2]!.body.path_on_host).toBe('/rootfs.ext4');
    expect(log[3]!.body.path_on_host).toBe('/overlay.ext4');
  });

  it('the fakes refuse what the real ones would: so the test above can fail', async () => {
    const base = join(work, 'refusals');
    // firecracker's own --id after `--` is refused by the jailer (it passes --id itself).
    const vm = await vmIn(base, 'scaler-fc-11111111');
    const { spawnSync } = await import('node:child_process');
    const run = (args: string[]) => spawnSync(bins.jailer, args, { encoding: 'utf8' });
    const ok = ['--id', vm.id, '--exec-file', bins.firecracker, '--uid', '1', '--gid', '1'];
    expect(run([...ok, '--', '--id', 'x']).stderr).toMatch(/--id after -- : the jailer passes it itself/);
    expect(run([...ok, '--chroot', base]).stderr).toMatch(/unknown argument --chroot/);
    expect(run(ok.slice(2)).stderr).toMatch(/--id is required/);
    expect(run([...ok.slice(0, 1), 'bad_id', ...ok.slice(2)]).stderr).toMatch(/invalid --id/);
    expect(run([...ok, '--netns', join(work, 'no-such-netns')]).stderr).toMatch(/does not exist/);

    // A chroot base that is not the VM directory's is refused before anything runs.
    const driver = new FirecrackerDriver({
      firecrackerPath: bins.firecracker,
      jailer: jailOf(join(work, 'elsewhere')),
      logger: pino({ level: 'silent' }),
      hostEnv: process.env,
    });
    await expect(driver.start(vm)).rejects.toThrow(/the jailer would use .*elsewhere/);
  });

  it('a shared guest file others cannot read is refused with the field and the fix, not chowned', async () => {
    const base = join(work, 'unreadable');
    const vm = await vmIn(base, 'scaler-fc-33333333');
    const kernel = join(work, 'vmlinux-0600');
    await writeFile(kernel, 'k', { mode: 0o600 });
    const driver = new FirecrackerDriver({
      firecrackerPath: bins.firecracker,
      jailer: jailOf(base),
      logger: pino({ level: 'silent' }),
      hostEnv: process.env,
    });
    await expect(driver.start({ ...vm, kernel })).rejects.toThrow(
      /kernelPath .*vmlinux-0600 is not readable by others \(mode 0600\).*chmod 0644/,
    );
    expect((await stat(kernel)).uid).toBe(0);
  });

  it('the fake jailer refuses a shared guest file the jail uid owns (a driver that chowned it fails)', async () => {
    const base = join(work, 'chowned');
    const id = 'scaler-fc-44444444';
    const root = join(base, 'firecracker', id, 'root');
    await mkdir(root, { recursive: true });
    const shared = join(work, 'shared-rootfs.ext4');
    await writeFile(shared, 'r');
    await chmod(shared, 0o644);
    await link(shared, join(root, 'rootfs.ext4'));
    const { spawnSync } = await import('node:child_process');
    const args = ['--id', id, '--exec-file', bins.firecracker, '--uid', '4242', '--gid', '4242'];
    const run = () => spawnSync(bins.jailer, [...args, '--chroot-base-dir', base], { encoding: 'utf8' });
    const accepted = run();
    // Root's 0644 link is accepted: the jailer goes on to exec firecracker (which wants its socket flag).
    expect(accepted.stderr).not.toMatch(/fake jailer/);
    expect(accepted.stderr).toMatch(/fake firecracker: --api-sock is required/);
    await chown(shared, 4242, 4242);
    const refused = run();
    expect(refused.status).not.toBe(0);
    expect(refused.stderr).toMatch(/shared guest file rootfs.ext4 .*writable by the jail's uid 4242/);
  });

  it('guest files the jailed uid cannot read are refused by the fake firecracker', async () => {
    const base = join(work, 'perm');
    const vm = await vmIn(base, 'scaler-fc-22222222');
    // Started directly (no jailer, so no chown), with the jail's view: the root-owned 0600 overlay fails.
    const { spawn } = await import('node:child_process');
    const child = spawn(
      bins.firecracker,
      ['--api-sock', '/run/firecracker.socket', '--fake-jail-root', vm.dir],
      {
        env: { ...process.env, FAKE_FC_UID: String(JAIL_ID), FAKE_FC_GID: String(JAIL_ID) },
        stdio: ['ignore', 'ignore', 'pipe'],
      },
    );
    let err = '';
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    const code = await new Promise((r) => child.once('exit', r));
    expect(code).toBe(1);
    expect(err).toMatch(/cannot create the API socket: \/run: not writable by 65534/);
  });
});
