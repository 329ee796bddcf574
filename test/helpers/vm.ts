import { execFile } from 'node:child_process';
import { readdir, readFile } from 'node:fs/promises';
import { promisify } from 'node:util';

const exec = promisify(execFile);

/** The guest built by scripts/build-vm-guest.sh (scripts/system/setup.sh exports these). */
export function vmGuest(): { kernel: string; initrd: string; rootfs: string } {
  const kernel = process.env.KICI_TEST_VM_KERNEL;
  const initrd = process.env.KICI_TEST_VM_INITRD;
  const rootfs = process.env.KICI_TEST_VM_ROOTFS;
  if (!kernel || !initrd || !rootfs) {
    throw new Error(
      'KICI_TEST_VM_KERNEL, KICI_TEST_VM_INITRD and KICI_TEST_VM_ROOTFS must name the guest: source /tmp/kici-sys/env after scripts/system/setup.sh (or run scripts/build-vm-guest.sh <dir>)',
    );
  }
  return { kernel, initrd, rootfs };
}

/** A VM scaler config on its own bridge and subnet, so suites sharing a netns do not collide. */
export function vmConfig(o: {
  name: string;
  bridge: string;
  subnet: string;
  base: string;
  maxAgents?: number;
  table?: string;
  extraHosts?: string[];
}) {
  const g = vmGuest();
  return {
    version: 1,
    globalMaxAgents: 4,
    firecracker: {
      cidr: `${o.subnet}.0/24`,
      bridgeName: o.bridge,
      gateway: `${o.subnet}.1`,
      netmask: '255.255.255.0',
      table: o.table ?? `${o.name}-t`,
    },
    scalers: [
      {
        name: o.name,
        type: 'firecracker',
        vmm: 'qemu',
        kernelPath: g.kernel,
        initrdPath: g.initrd,
        chrootBaseDir: o.base,
        vcpuCount: 1,
        memSizeMib: 512,
        maxAgents: o.maxAgents ?? 2,
        ...(o.extraHosts ? { extraHosts: o.extraHosts } : {}),
        labelSets: [{ labels: ['linux', o.name], rootfsPath: g.rootfs, overlayDriveSizeMib: 256 }],
      },
    ],
  };
}

/** Live QEMU processes whose command line names `dir` (a VM directory base). */
export async function qemuPidsUnder(dir: string): Promise<number[]> {
  const out: number[] = [];
  for (const name of await readdir('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const cmd = (await readFile(`/proc/${name}/cmdline`, 'utf8')).split('\0');
      if (cmd[0]?.includes('qemu-system') && cmd.some((a) => a.includes(dir))) out.push(Number(name));
    } catch {
      // gone
    }
  }
  return out;
}

/** Interfaces named like VM TAPs that sit on `bridge`. */
export async function tapsOn(bridge: string): Promise<string[]> {
  const { stdout } = await exec('ip', ['-o', 'link', 'show', 'master', bridge]).catch(() => ({ stdout: '' }));
  return stdout
    .split('\n')
    .map((l) => /^\d+:\s+([^:@\s]+)/.exec(l)?.[1])
    .filter((n): n is string => !!n);
}

export async function deleteLink(name: string): Promise<void> {
  await exec('ip', ['link', 'del', 'dev', name]).catch(() => {});
}
