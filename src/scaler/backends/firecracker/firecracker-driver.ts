import { spawn } from 'node:child_process';
import { copyFile, lchown, link, mkdir, open, readdir, rm, stat } from 'node:fs/promises';
import { request } from 'node:http';
import { basename, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from '../../../util/logger.js';
import { readPidRecord, vmFiles } from './vm-dir.js';
import type { StartedVm, VmLaunch, VmmDriver } from './vmm.js';
import { killAndWait, vmmOwns, waitGone } from './vm-process.js';
import { hostToolEnv } from '../../../util/host-tool-env.js';

export interface FirecrackerDriverOptions {
  firecrackerPath: string;
  /** With a jailer, firecracker runs chrooted in the VM directory as uid:gid. */
  jailer?: JailerOptions | undefined;
  logger: Logger;
  /** The orchestrator's environment; firecracker (or the jailer) gets only hostToolEnv's part of it. */
  hostEnv: NodeJS.ProcessEnv;
  socketWaitMs?: number;
}

export interface JailerOptions {
  path: string;
  uid: number;
  gid: number;
  chrootBase: string;
  /** A network namespace (path) the jailer joins before it execs firecracker. */
  netns?: string | undefined;
}

/** The jailer's rule for `--id`: letters, digits and hyphens, at most 64. */
const JAILER_ID = /^[A-Za-z0-9-]{1,64}$/;

/**
 * The jailer's command line: its own flags, then `--` and what firecracker gets. The jailer itself
 * hands firecracker `--id` (and its start-time flags), so they must not be repeated after `--`.
 */
export function jailerArgs(jail: JailerOptions, firecrackerPath: string, id: string): string[] {
  return [
    ...['--id', id, '--exec-file', firecrackerPath],
    ...['--uid', String(jail.uid), '--gid', String(jail.gid), '--chroot-base-dir', jail.chrootBase],
    ...(jail.netns ? ['--netns', jail.netns] : []),
    '--',
    ...['--api-sock', '/run/firecracker.socket'],
  ];
}

/** One call on Firecracker's API socket; resolves with the answer's body, rejects with the VMM's fault message on a non-2xx answer. */
export function fcApi(socketPath: string, method: string, path: string, body?: unknown): Promise<string> {
  return new Promise((resolve, reject) => {
    const payload = body === undefined ? undefined : JSON.stringify(body);
    const req = request(
      {
        socketPath,
        method,
        path,
        headers: {
          Accept: 'application/json',
          ...(payload
            ? { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(payload) }
            : {}),
        },
        timeout: 5_000,
      },
      (res) => {
        let text = '';
        res.on('data', (d: Buffer) => (text += d.toString()));
        res.on('end', () => {
          if ((res.statusCode ?? 500) < 300) return resolve(text);
          let fault = text;
          try {
            fault = (JSON.parse(text) as { fault_message?: string }).fault_message ?? text;
          } catch {
            // not JSON: keep the raw text
          }
          reject(new Error(`firecracker ${method} ${path}: ${res.statusCode} ${fault}`));
        });
      },
    );
    req.on('timeout', () => req.destroy(new Error(`firecracker ${method} ${path}: timed out`)));
    req.on('error', reject);
    req.end(payload);
  });
}

/**
 * Hard-link (copy across filesystems) a shared guest file into the jail, where firecracker can see
 * it. The link is the same inode every VM boots, so it stays root's: the jailed uid only needs to
 * read it, which it can when the file is readable by others.
 */
async function intoJail(src: string, dir: string, name: string, field: string): Promise<string> {
  const mode = (await stat(src)).mode & 0o777;
  if (!(mode & 0o004))
    throw new Error(
      `${field} ${src} is not readable by others (mode ${mode.toString(8).padStart(4, '0')}): the jailed firecracker cannot read it, and a shared guest file is never handed to the jail's uid; run chmod 0644 ${src}`,
    );
  const dst = join(dir, name);
  await rm(dst, { force: true });
  await link(src, dst).catch(async (err: NodeJS.ErrnoException) => {
    if (err.code !== 'EXDEV' && err.code !== 'EPERM') throw err;
    await copyFile(src, dst);
  });
  return `/${name}`;
}

/** The shared read-only guest files as linked into a jail: never chowned (see intoJail). */
const SHARED_IN_JAIL = new Set(['kernel', 'initrd', 'rootfs.ext4']);

/** chown -R of the VM's own files, without following links out of the tree and skipping `keep`. */
async function chownTree(dir: string, uid: number, gid: number, keep: ReadonlySet<string>): Promise<void> {
  await lchown(dir, uid, gid);
  for (const e of await readdir(dir, { withFileTypes: true })) {
    if (keep.has(e.name)) continue;
    const p = join(dir, e.name);
    if (e.isDirectory()) await chownTree(p, uid, gid, new Set());
    else await lchown(p, uid, gid);
  }
}

/**
 * Firecracker through its REST API: machine-config, boot-source, drives, network-interfaces,
 * MMDS (which carries the agent's credentials), then InstanceStart.
 */
export class FirecrackerDriver implements VmmDriver {
  readonly kind = 'firecracker' as const;

  constructor(private readonly opts: FirecrackerDriverOptions) {}

  describe(): string {
    return this.opts.jailer ? 'firecracker (jailer)' : 'firecracker';
  }

  async start(vm: VmLaunch): Promise<StartedVm> {
    const jail = this.opts.jailer;
    const files = vmFiles(vm.dir);
    if (jail) await this.prepareJail(vm);
    // Inside a jail every path is relative to its root, which is the VM directory.
    const inVm = async (p: string, name: string, field: string) =>
      jail ? intoJail(p, vm.dir, name, field) : p;
    const kernel = await inVm(vm.kernel, 'kernel', 'kernelPath');
    const initrd = vm.initrd ? await inVm(vm.initrd, 'initrd', 'initrdPath') : undefined;
    const rootfs = await inVm(vm.rootfs, 'rootfs.ext4', 'rootfsPath');
    const overlay = jail ? `/${basename(vm.overlay)}` : vm.overlay;
    // The jailed firecracker runs as uid:gid: it gets its own files (overlay, logs, socket dir),
    // and only reads the shared ones.
    if (jail && process.getuid?.() === 0) await chownTree(vm.dir, jail.uid, jail.gid, SHARED_IN_JAIL);
    const [file, args] = jail
      ? [jail.path, jailerArgs(jail, this.opts.firecrackerPath, vm.id)]
      : [this.opts.firecrackerPath, ['--api-sock', files.apiSocket, '--id', vm.id]];
    // Firecracker's stdout is the guest's serial console; its stderr carries VMM diagnostics.
    const serial = await open(vm.serialLog, 'a');
    const vmmLog = await open(vm.vmmLog, 'a');
    let pid: number;
    let exited: Promise<number | null>;
    try {
      // The jailer hands its environment on to the firecracker it execs: one scrubbed env covers both.
      const child = spawn(file, args, {
        detached: true,
        stdio: ['ignore', serial.fd, vmmLog.fd],
        env: hostToolEnv(this.opts.hostEnv),
      });
      await new Promise<void>((ok, fail) => {
        child.once('spawn', ok);
        child.once('error', fail);
      });
      child.unref();
      pid = child.pid!;
      exited = new Promise((res) => child.once('exit', (code) => res(code)));
    } finally {
      await serial.close();
      await vmmLog.close();
    }
    try {
      await this.waitForSocket(files.apiSocket, exited);
      const sock = files.apiSocket;
      await fcApi(sock, 'PUT', '/machine-config', {
        vcpu_count: vm.vcpus,
        mem_size_mib: vm.memMib,
        smt: false,
      });
      await fcApi(sock, 'PUT', '/boot-source', {
        kernel_image_path: kernel,
        boot_args: `${vm.bootArgs} reboot=k random.trust_cpu=on`,
        ...(initrd ? { initrd_path: initrd } : {}),
      });
      await fcApi(sock, 'PUT', '/drives/rootfs', {
        drive_id: 'rootfs',
        path_on_host: rootfs,
        is_root_device: true,
        is_read_only: true,
      });
      await fcApi(sock, 'PUT', '/drives/overlay', {
        drive_id: 'overlay',
        path_on_host: overlay,
        is_root_device: false,
        is_read_only: false,
      });
      await fcApi(sock, 'PUT', '/network-interfaces/eth0', {
        iface_id: 'eth0',
        host_dev_name: vm.tap,
        guest_mac: vm.mac,
      });
      await fcApi(sock, 'PUT', '/mmds/config', {
        network_interfaces: ['eth0'],
        ipv4_address: '169.254.169.254',
      });
      // The guest reads latest/meta-data/kici-env-file: credentials never touch the shared rootfs.
      await fcApi(sock, 'PUT', '/mmds', {
        latest: {
          'meta-data': { 'kici-env-file': vm.guestEnv, 'kici-agent-id': vm.id, 'kici-scaler-managed': '1' },
        },
      });
      await fcApi(sock, 'PUT', '/actions', { action_type: 'InstanceStart' });
    } catch (err) {
      await killAndWait(pid);
      throw err;
    }
    return { pid, exited };
  }

  /**
   * The jailer puts firecracker in `<chroot base>/<exec file name>/<id>/root`; that must be the VM
   * directory the backend prepared, so the file name has to be `firecracker` and the id one the
   * jailer accepts.
   */
  private async prepareJail(vm: VmLaunch): Promise<void> {
    const jail = this.opts.jailer!;
    if (!JAILER_ID.test(vm.id))
      throw new Error(
        `agent id "${vm.id}" is not a valid jailer --id (letters, digits, hyphens; at most 64)`,
      );
    const root = join(jail.chrootBase, basename(this.opts.firecrackerPath), vm.id, 'root');
    if (root !== vm.dir)
      throw new Error(
        `the jailer would use ${root}, not the VM directory ${vm.dir}: firecrackerPath's file name must be "firecracker" and chrootBaseDir the scaler's`,
      );
    await mkdir(join(vm.dir, 'run'), { recursive: true });
  }

  /**
   * The agent has its configuration: empty MMDS so the token is not left where any process in the
   * guest could fetch it again.
   */
  async configAcknowledged(vm: { id: string; dir: string }): Promise<void> {
    await fcApi(vmFiles(vm.dir).apiSocket, 'PUT', '/mmds', { latest: { 'meta-data': {} } });
  }

  private async waitForSocket(path: string, exited: Promise<number | null>): Promise<void> {
    let gone = false;
    void exited.then(() => (gone = true));
    const until = Date.now() + (this.opts.socketWaitMs ?? 5_000);
    while (Date.now() < until && !gone) {
      if (
        await stat(path).then(
          (s) => s.isSocket(),
          () => false,
        )
      )
        return;
      await sleep(100);
    }
    throw new Error(
      gone ? 'firecracker exited before its API socket appeared' : `no API socket at ${path} after 5 s`,
    );
  }

  async stop(vm: { id: string; dir: string; pid: number }, graceMs: number): Promise<void> {
    // Ctrl-Alt-Del lets the guest shut down; errors are expected (arm64 has no i8042, or it is gone).
    await fcApi(vmFiles(vm.dir).apiSocket, 'PUT', '/actions', { action_type: 'SendCtrlAltDel' }).catch(
      () => {},
    );
    if (await waitGone(vm.pid, graceMs)) return;
    if (await this.owns(vm.pid, vm.dir)) await killAndWait(vm.pid);
  }

  async owns(pid: number, dir: string): Promise<boolean> {
    return vmmOwns(pid, dir, ['firecracker'], await readPidRecord(dir));
  }
}
