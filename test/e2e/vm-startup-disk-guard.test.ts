import { access, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { Orchestrator } from '../../src/server/orchestrator.js';
import { UserError } from '../../src/util/errors.js';
import { freshDataDir } from '../helpers/data-dir.js';
import { writeConfig } from '../helpers/orchestrator.js';

/**
 * Spec E at start-up: with a VM scaler configured and the VM volume short of space, the guard reaps
 * dead VMs' leftovers before anything else, and when that is not enough start-up fails after the
 * backoff with a message naming the volume and the way out. Nothing else is started (no bridge).
 */
const dirs: string[] = [];
afterEach(async () => {
  for (const d of dirs.splice(0)) await rm(d, { recursive: true, force: true });
});

describe('start-up disk guard', () => {
  it('reaps a dead VM, then refuses to start after the backoff when space is still short', async () => {
    const base = await mkdtemp(join(tmpdir(), 'kici-sdg-'));
    const dataDir = await freshDataDir();
    dirs.push(base, dataDir);
    const dead = join(base, 'firecracker', 'scaler-vm-dead0001', 'root');
    await mkdir(dead, { recursive: true });
    await writeFile(join(dead, 'vmm.pid'), '999999999');
    await writeFile(join(dead, 'overlay.ext4'), Buffer.alloc(4096));
    const config = await writeConfig({
      version: 1,
      firecracker: { bridgeName: 'sdg-br-never', cidr: '10.231.12.0/24', gateway: '10.231.12.1' },
      scalers: [
        {
          name: 'vm',
          type: 'firecracker',
          vmm: 'qemu',
          kernelPath: '/nonexistent/vmlinux',
          chrootBaseDir: base,
          maxAgents: 1,
          labelSets: [{ labels: ['vm'], rootfsPath: '/nonexistent/rootfs.ext4' }],
        },
      ],
    });
    const t0 = Date.now();
    const err = await Orchestrator.start({
      port: 0,
      dataDir,
      scalerConfigPath: config,
      logger: pino({ level: 'silent' }),
      startupDiskGuard: { statfs: async () => ({ bavail: 1, bsize: 4096 }), backoffMs: 300 },
    }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(UserError);
    expect((err as Error).message).toMatch(
      new RegExp(
        `not enough disk space under ${base} for micro-VMs: 4096 bytes free .*kici-admin scaler reap-orphans`,
      ),
    );
    expect(Date.now() - t0).toBeGreaterThanOrEqual(300);
    // The guard's reap ran: the dead VM's directory is gone.
    await expect(access(join(base, 'firecracker', 'scaler-vm-dead0001'))).rejects.toThrow();
  });
});
