import { spawn, type ChildProcess } from 'node:child_process';
import { access, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { scalerFileSchema, type ScalerConfig } from '../../../../src/config/index.js';
import { runDiskGuard } from '../../../../src/index.js';
import { DEFAULT_DISK_GUARD_THRESHOLD_BYTES } from '../../../../src/scaler/backends/firecracker/disk-guard.js';

const GiB = 1024 ** 3;

function config(base: string, withVm = true): ScalerConfig {
  const scalers: unknown[] = [
    { name: 'bm', type: 'bare-metal', maxAgents: 1, labelSets: [{ labels: ['a'], binaryPath: '/bin/true' }] },
  ];
  if (withVm) {
    scalers.push({
      name: 'vm',
      type: 'firecracker',
      vmm: 'qemu',
      kernelPath: '/k',
      chrootBaseDir: base,
      maxAgents: 1,
      labelSets: [{ labels: ['b'], rootfsPath: '/r' }],
    });
  }
  return scalerFileSchema.parse({ version: 1, scalers });
}

const bytes = (free: number) => ({ bavail: free / 4096, bsize: 4096 });
const dirs: string[] = [];
const children: ChildProcess[] = [];
afterEach(async () => {
  for (const c of children.splice(0)) c.kill('SIGKILL');
  for (const d of dirs.splice(0)) await rm(d, { recursive: true, force: true });
});

describe('runDiskGuard', () => {
  it('is a no-op without a VM scaler: nothing measured, nothing reaped', async () => {
    const statfs = vi.fn();
    const reapFn = vi.fn();
    const res = await runDiskGuard({ config: config('/nowhere', false), statfs, reapFn });
    expect(res).toEqual({ reaped: false, recovered: true, freeBytesAfter: Number.MAX_SAFE_INTEGER });
    expect(statfs).not.toHaveBeenCalled();
    expect(reapFn).not.toHaveBeenCalled();
  });

  it('does nothing when free space is at or above the threshold, measuring the VM directory', async () => {
    const statfs = vi.fn(async () => bytes(DEFAULT_DISK_GUARD_THRESHOLD_BYTES));
    const reapFn = vi.fn();
    const res = await runDiskGuard({ config: config('/srv/vms'), statfs, reapFn });
    expect(res).toEqual({ reaped: false, recovered: true, freeBytesAfter: GiB });
    expect(statfs).toHaveBeenCalledWith('/srv/vms');
    expect(reapFn).not.toHaveBeenCalled();
  });

  it('below the threshold: reaps, re-measures and reports whether space was recovered', async () => {
    const lines: string[] = [];
    let free = 10 * 1024 * 1024;
    const reapFn = vi.fn(async () => {
      free = 3 * GiB;
      return { reaped: 4 };
    });
    const res = await runDiskGuard({
      config: config('/srv/vms'),
      statfs: async () => bytes(free),
      reapFn,
      write: (l) => lines.push(l),
    });
    expect(res).toEqual({ reaped: true, recovered: true, freeBytesAfter: 3 * GiB });
    expect(lines[0]).toMatch(/10485760 bytes free under \/srv\/vms, below the 1073741824-byte threshold/);
    expect(lines[1]).toMatch(/reaped 4 stale VM artifacts; 3221225472 bytes free/);
  });

  it('reports not recovered when the reap frees too little (the caller backs off and exits)', async () => {
    const res = await runDiskGuard({
      config: config('/srv/vms'),
      thresholdBytes: 2 * GiB,
      statfs: async () => bytes(GiB),
      reapFn: async () => ({ reaped: 0 }),
      write: () => {},
    });
    expect(res).toEqual({ reaped: true, recovered: false, freeBytesAfter: GiB });
  });

  it('the default reap removes the directories of dead VMs and spares a running one', async () => {
    const base = await mkdtemp(join(tmpdir(), 'kici-dg-'));
    dirs.push(base);
    const dead = spawn('true');
    await new Promise((r) => dead.once('exit', r));
    const live = spawn('sleep', ['30']);
    children.push(live);
    const vmDir = (id: string) => join(base, 'firecracker', id, 'root');
    for (const [id, pid] of [
      ['scaler-vm-dead0001', dead.pid!],
      ['scaler-vm-live0002', live.pid!],
    ] as const) {
      await mkdir(vmDir(id), { recursive: true });
      await writeFile(join(vmDir(id), 'vmm.pid'), String(pid));
      await writeFile(join(vmDir(id), 'overlay.ext4'), Buffer.alloc(4096));
      await writeFile(join(vmDir(id), 'serial-console.log'), 'boot\n');
    }
    const deadOverlay = join(vmDir('scaler-vm-dead0001'), 'overlay.ext4');
    // Free space follows the dead VM's overlay: the guard recovers only if the reap removed it.
    const statfs = async () =>
      bytes(
        await access(deadOverlay).then(
          () => 4096,
          () => 2 * GiB,
        ),
      );
    const res = await runDiskGuard({ config: config(base), statfs, write: () => {} });
    expect(res).toEqual({ reaped: true, recovered: true, freeBytesAfter: 2 * GiB });
    await expect(access(join(base, 'firecracker', 'scaler-vm-dead0001'))).rejects.toThrow();
    await access(join(vmDir('scaler-vm-live0002'), 'overlay.ext4'));
  });
});
