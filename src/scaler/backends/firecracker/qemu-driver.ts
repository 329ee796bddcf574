import { spawn } from 'node:child_process';
import { access, constants, open, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Logger } from '../../../util/logger.js';
import { readPidRecord } from './vm-dir.js';
import type { StartedVm, VmLaunch, VmmDriver } from './vmm.js';
import { killAndWait, vmmOwns, waitGone } from './vm-process.js';
import { hostToolEnv } from '../../../util/host-tool-env.js';

export type QemuAccel = 'kvm' | 'tcg';

/** The config drive is read whole by the guest; a sector multiple keeps every block layer happy. */
const CONFIG_DRIVE_BYTES = 64 * 1024;
const configDrivePath = (dir: string) => join(dir, 'config.env');

/**
 * QEMU's `microvm` machine. Credentials travel on a private config drive (a raw file only root can
 * read), never on the command line, which every host user can see in `ps`.
 */
export class QemuDriver implements VmmDriver {
  readonly kind = 'qemu' as const;

  constructor(
    private readonly opts: {
      binary: string;
      accel: QemuAccel;
      logger: Logger;
      /** The orchestrator's environment; QEMU gets only hostToolEnv's part of it. */
      hostEnv: NodeJS.ProcessEnv;
    },
  ) {}

  describe(): string {
    return this.opts.accel === 'kvm' ? 'qemu microvm (KVM)' : 'qemu microvm (TCG, software emulation)';
  }

  /** TCG cannot calibrate the TSC in time and the guest stalls without a given frequency. */
  bootArgsExtra(): string {
    return this.opts.accel === 'tcg' ? 'tsc_early_khz=2000000' : '';
  }

  /**
   * A config drive cannot be detached without a QEMU monitor, so after the agent's acknowledgement
   * its backing file is overwritten with zeros in place (same size, the device stays valid). The
   * guest's init drops its buffer cache for the drive after reading it, so a later read in the guest
   * (a job step reading /dev/vdc) gets the zeros, and the token is off the host's disk too.
   */
  async configAcknowledged(vm: { id: string; dir: string }): Promise<void> {
    const fh = await open(configDrivePath(vm.dir), 'r+');
    try {
      await fh.write(Buffer.alloc(CONFIG_DRIVE_BYTES), 0, CONFIG_DRIVE_BYTES, 0);
      await fh.datasync();
    } finally {
      await fh.close();
    }
  }

  async start(vm: VmLaunch): Promise<StartedVm> {
    const configDrive = configDrivePath(vm.dir);
    const env = Buffer.alloc(CONFIG_DRIVE_BYTES);
    const body = Buffer.from(vm.guestEnv);
    if (body.length >= CONFIG_DRIVE_BYTES)
      throw new Error('agent environment exceeds the 64 KiB config drive');
    body.copy(env);
    await writeFile(configDrive, env, { mode: 0o600 });
    const args = [
      '-M',
      'microvm,x-option-roms=off,isa-serial=on,rtc=on',
      '-accel',
      this.opts.accel,
      ...(this.opts.accel === 'kvm' ? ['-cpu', 'host'] : ['-cpu', 'max']),
      '-m',
      String(vm.memMib),
      '-smp',
      String(vm.vcpus),
      '-nodefaults',
      '-no-user-config',
      '-display',
      'none',
      '-no-reboot',
      '-serial',
      `file:${vm.serialLog}`,
      '-kernel',
      vm.kernel,
      ...(vm.initrd ? ['-initrd', vm.initrd] : []),
      '-append',
      [vm.bootArgs, this.bootArgsExtra()].filter(Boolean).join(' '),
      // Order fixes the guest's names: vda rootfs (read-only), vdb overlay, vdc config drive.
      '-drive',
      `id=rootfs,file=${vm.rootfs},format=raw,readonly=on,if=none`,
      '-device',
      'virtio-blk-device,drive=rootfs',
      '-drive',
      `id=overlay,file=${vm.overlay},format=raw,if=none`,
      '-device',
      'virtio-blk-device,drive=overlay',
      '-drive',
      `id=config,file=${configDrive},format=raw,readonly=on,if=none`,
      '-device',
      'virtio-blk-device,drive=config',
      '-netdev',
      `tap,id=net0,ifname=${vm.tap},script=no,downscript=no`,
      '-device',
      `virtio-net-device,netdev=net0,mac=${vm.mac}`,
    ];
    const log = await open(vm.vmmLog, 'a');
    try {
      const child = spawn(this.opts.binary, args, {
        detached: true,
        stdio: ['ignore', log.fd, log.fd],
        env: hostToolEnv(this.opts.hostEnv),
      });
      await new Promise<void>((ok, fail) => {
        child.once('spawn', ok);
        child.once('error', fail);
      });
      child.unref();
      const exited = new Promise<number | null>((res) => child.once('exit', (code) => res(code)));
      return { pid: child.pid!, exited };
    } finally {
      await log.close();
    }
  }

  async stop(vm: { id: string; dir: string; pid: number }, graceMs: number): Promise<void> {
    if (!(await this.owns(vm.pid, vm.dir))) return;
    // SIGTERM makes QEMU exit cleanly (closing the TAP); the guest is disposable, so no ACPI dance.
    try {
      process.kill(vm.pid, 'SIGTERM');
    } catch {
      return;
    }
    if (!(await waitGone(vm.pid, graceMs))) await killAndWait(vm.pid);
  }

  async owns(pid: number, dir: string): Promise<boolean> {
    return vmmOwns(pid, dir, ['qemu-system'], await readPidRecord(dir));
  }
}

/**
 * Can KVM boot an ordinary guest kernel here? A nested or PVM-only KVM accepts `-accel kvm` and then
 * hangs, so the probe boots the real kernel for a moment and waits for its first console line.
 */
export async function probeKvm(
  binary: string,
  kernel: string,
  hostEnv: NodeJS.ProcessEnv,
  timeoutMs = 4_000,
): Promise<boolean> {
  try {
    await access('/dev/kvm', constants.R_OK | constants.W_OK);
  } catch {
    return false;
  }
  const child = spawn(
    binary,
    [
      ...['-M', 'microvm,x-option-roms=off,isa-serial=on', '-accel', 'kvm', '-cpu', 'host', '-m', '128'],
      ...['-nodefaults', '-no-user-config', '-display', 'none', '-serial', 'stdio', '-no-reboot'],
      ...['-kernel', kernel, '-append', 'console=ttyS0 earlyprintk=ttyS0 panic=-1 rdinit=/none'],
    ],
    // The probe is a VMM like any other: it runs a guest kernel, with the same environment.
    { stdio: ['ignore', 'pipe', 'ignore'], env: hostToolEnv(hostEnv) },
  );
  return new Promise<boolean>((resolve) => {
    let out = '';
    const done = (ok: boolean) => {
      clearTimeout(timer);
      child.stdout.removeAllListeners('data');
      if (child.exitCode === null) child.kill('SIGKILL');
      resolve(ok);
    };
    const timer = setTimeout(() => done(false), timeoutMs);
    child.stdout.on('data', (d: Buffer) => {
      out += d.toString();
      if (out.includes('Linux version')) done(true);
    });
    child.once('error', () => done(false));
    child.once('exit', () => done(out.includes('Linux version')));
  });
}

const probes = new Map<string, Promise<QemuAccel>>();

/** Probe once per binary and kernel for the life of the process, and say which was chosen. */
export function chooseQemuAccel(
  binary: string,
  kernel: string,
  hostEnv: NodeJS.ProcessEnv,
  logger: Logger,
): Promise<QemuAccel> {
  const key = `${binary}\0${kernel}`;
  let p = probes.get(key);
  if (!p) {
    p = probeKvm(binary, kernel, hostEnv).then((kvm) => {
      const accel: QemuAccel = kvm ? 'kvm' : 'tcg';
      logger.info(
        { accel, binary },
        kvm
          ? 'qemu: KVM boots guests on this host; VMs use hardware virtualisation'
          : 'qemu: KVM is missing or cannot boot an ordinary guest here; VMs use TCG software emulation (slower boots)',
      );
      return accel;
    });
    probes.set(key, p);
  }
  return p;
}
