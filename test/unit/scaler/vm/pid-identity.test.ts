import { spawn, type ChildProcess } from 'node:child_process';
import { mkdir, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { firecrackerNetworkSchema } from '../../../../src/config/index.js';
import { FirecrackerDriver } from '../../../../src/scaler/backends/firecracker/firecracker-driver.js';
import { HostNet } from '../../../../src/scaler/backends/firecracker/host-net.js';
import { InMemoryIpAllocator } from '../../../../src/scaler/backends/firecracker/ip-allocator.js';
import { VmOrphans } from '../../../../src/scaler/backends/firecracker/orphans.js';
import type { TrackedVm, VmHost } from '../../../../src/scaler/backends/firecracker/tracked.js';
import { vmDirFor, vmFiles, writePid } from '../../../../src/scaler/backends/firecracker/vm-dir.js';
import { pidAlive, procStartTime, waitGone } from '../../../../src/scaler/backends/firecracker/vm-process.js';

/**
 * A recorded VMM pid is ours only while the process under it started when ours did. The stand-in
 * VMMs are real processes: /bin/sh run through a link named `firecracker` (so the kernel's comm is
 * `firecracker`) with the VM directory on its command line, as a real one has.
 */
let work: string;
let shAsFirecracker: string;
const children: ChildProcess[] = [];
const driver = new FirecrackerDriver({
  firecrackerPath: '/nonexistent',
  logger: pino({ level: 'silent' }),
  hostEnv: process.env,
});

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), 'kici-pid-'));
  await mkdir(join(work, 'bin'));
  shAsFirecracker = join(work, 'bin', 'firecracker');
  await symlink('/bin/sh', shAsFirecracker);
});
afterEach(async () => {
  for (const c of children.splice(0)) {
    if (c.pid && (await pidAlive(c.pid))) {
      c.kill('SIGKILL');
      await waitGone(c.pid, 5_000);
    }
  }
});
afterAll(() => rm(work, { recursive: true, force: true }));

/** A process that looks exactly like the VM's VMM: same comm, same command line. */
async function fakeVmm(dir: string): Promise<number> {
  const c = spawn(shAsFirecracker, ['-c', 'read x', 'firecracker', '--api-sock', vmFiles(dir).apiSocket], {
    stdio: ['pipe', 'ignore', 'ignore'],
  });
  children.push(c);
  await new Promise((ok, fail) => c.once('spawn', ok).once('error', fail));
  return c.pid!;
}

function host(base: string): VmHost {
  const network = firecrackerNetworkSchema.parse({});
  const vms = new Map<string, TrackedVm>();
  return {
    name: 'pid-scaler',
    base,
    vms,
    log: pino({ level: 'silent' }),
    opts: {
      allocator: new InMemoryIpAllocator('pid-scaler', network.cidr, network.gateway),
      // No TAPs exist here; the host commands are not what this test is about.
      hostNet: new HostNet(() => Promise.resolve('')),
      isolation: undefined,
      driver,
      network,
    },
    removeArtifacts: () => Promise.resolve(),
    trackVm: (t) => void vms.set(t.agent.id, t),
    startTails: () => {},
  };
}

describe('VMM pid identity uses the process start time', () => {
  it('the recorded process is ours; the same pid with another start time is not', async () => {
    const base = join(work, 'a');
    const dir = vmDirFor(base, 'pid-vm-a');
    await mkdir(dir, { recursive: true });
    const a = await fakeVmm(dir);
    await writePid(dir, a);
    const [, start] = (await readFile(vmFiles(dir).pid, 'utf8')).split(' ');
    expect(start).toBe(await procStartTime(a));
    expect(await driver.owns(a, dir)).toBe(true);

    // The pid is recycled: another process with the very same command line now holds the pid the
    // file names. Simulated by recording B's pid with A's start time (what A's record would say).
    await new Promise((r) => setTimeout(r, 30)); // at least one clock tick between the two starts
    const b = await fakeVmm(dir);
    expect(await procStartTime(b)).not.toBe(start);
    await writeFile(vmFiles(dir).pid, `${b} ${start}`);
    expect(await driver.owns(b, dir)).toBe(false);
    // Without a recorded start time the command line alone would have taken B for the VMM.
    await writeFile(vmFiles(dir).pid, String(b));
    expect(await driver.owns(b, dir)).toBe(true);
  });

  it('a recycled pid is neither adopted nor killed by reapUnowned', async () => {
    const base = join(work, 'b');
    const dir = vmDirFor(base, 'pid-vm-b');
    await mkdir(dir, { recursive: true });
    const a = await fakeVmm(dir);
    await writePid(dir, a);
    const [, aStart] = (await readFile(vmFiles(dir).pid, 'utf8')).split(' ');
    await new Promise((r) => setTimeout(r, 30)); // at least one clock tick between the two starts
    const b = await fakeVmm(dir);
    expect(await procStartTime(b)).not.toBe(aStart);
    await writeFile(vmFiles(dir).pid, `${b} ${aStart}`);
    const orphans = new VmOrphans(host(base));
    expect(await orphans.adopt('pid-vm-b', ['vm'], String(b))).toBe(false);
    expect(await orphans.reapUnowned('pid-vm-b')).toBe(true);
    // The directory went, the unrelated process did not.
    expect(await pidAlive(b)).toBe(true);
    expect(await pidAlive(a)).toBe(true);

    // Control: with A's true record, adopt takes A.
    const dir2 = vmDirFor(base, 'pid-vm-c');
    await mkdir(dir2, { recursive: true });
    const c = await fakeVmm(dir2);
    await writePid(dir2, c);
    const h = host(base);
    const lease = await h.opts.allocator.allocate('pid-vm-c');
    await writeFile(
      join(dir2, 'vm.json'),
      JSON.stringify({
        agentId: 'pid-vm-c',
        scalerName: 'pid-scaler',
        labelSet: ['vm'],
        ip: lease.ip,
        tap: lease.tap,
      }),
    );
    expect(await new VmOrphans(h).adopt('pid-vm-c', ['vm'], String(c))).toBe(true);
    expect(h.vms.get('pid-vm-c')?.pid).toBe(c);
  });
});
