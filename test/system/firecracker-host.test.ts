import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmod, mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { stringify } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bridgeMac } from '../../src/scaler/backends/firecracker/host-net.js';
import { joinLowPort, macOf } from '../helpers/bridge-ports.js';
import { ADMIN_BIN, runNode } from '../helpers/orchestrator.js';

/**
 * `kici-admin firecracker verify | provision | teardown` against the real `ip` and `nft`, inside the
 * system tier's private network namespace (the suite runs there). Each run uses its own bridge,
 * table and subnet, so runs side by side do not meet; forwarding is left as it was found.
 */

const run = promisify(execFile);
const tag = randomBytes(3).toString('hex');
const bridge = `kfc${tag}`;
const table = `kfc_${tag}`;
const octet = 100 + (parseInt(tag.slice(0, 2), 16) % 100);
let dir = '';
let configPath = '';
let record = '';
let forwardAtStart = '';

interface Row {
  name: string;
  status: string;
}

const admin = (...args: string[]) =>
  runNode([ADMIN_BIN, 'firecracker', ...args, '--config', configPath, '--record', record, '--json']).exited;
const linkExists = (name: string) =>
  run('ip', ['link', 'show', 'dev', name]).then(
    () => true,
    () => false,
  );
const ip = (...args: string[]) => run('ip', args);
const tableExists = () =>
  run('nft', ['list', 'table', 'inet', table]).then(
    () => true,
    () => false,
  );
const rowsOf = (stdout: string) =>
  Object.fromEntries((JSON.parse(stdout) as { rows: Row[] }).rows.map((r) => [r.name, r.status]));

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kici-fc-host-'));
  for (const f of ['firecracker', 'jailer']) {
    await writeFile(join(dir, f), '#!/bin/sh\nexit 0\n');
    await chmod(join(dir, f), 0o755);
  }
  await writeFile(join(dir, 'vmlinux'), 'kernel');
  configPath = join(dir, 'scalers.yaml');
  record = join(dir, 'record.json');
  await writeFile(
    configPath,
    stringify({
      version: 1,
      firecracker: {
        bridgeName: bridge,
        table,
        cidr: `10.${octet}.7.0/24`,
        gateway: `10.${octet}.7.1`,
        netmask: '255.255.255.0',
      },
      scalers: [
        {
          name: 'vm',
          type: 'firecracker',
          maxAgents: 1,
          firecrackerPath: join(dir, 'firecracker'),
          jailerPath: join(dir, 'jailer'),
          kernelPath: join(dir, 'vmlinux'),
          chrootBaseDir: join(dir, 'jailer-root'),
          uid: 1000,
          gid: 1000,
          labelSets: [{ labels: ['linux', 'vm'], rootfsPath: join(dir, 'rootfs.ext4') }],
        },
      ],
    }),
  );
  forwardAtStart = (await readFile('/proc/sys/net/ipv4/ip_forward', 'utf8')).trim();
});

afterAll(async () => {
  await run('ip', ['link', 'del', 'dev', bridge]).catch(() => {});
  await run('nft', ['delete', 'table', 'inet', table]).catch(() => {});
  await rm(dir, { recursive: true, force: true });
});

describe('firecracker host set-up in a private namespace', () => {
  it('verify fails on a bare host; provision makes it pass and is idempotent; teardown undoes it', async () => {
    const bare = await admin('verify');
    expect(bare.code).toBe(1);
    expect(rowsOf(bare.stdout)).toMatchObject({
      [`bridge:${bridge}`]: 'FAIL',
      [`firecracker-network:${table}`]: 'FAIL',
      'firecracker:vm': 'PASS',
      'chroot:vm': 'WARN',
    });

    const first = await admin('provision');
    expect(first.code, first.stderr + first.stdout).toBe(0);
    expect(await linkExists(bridge)).toBe(true);
    expect(await tableExists()).toBe(true);
    const set = await admin('verify');
    expect(rowsOf(set.stdout)).toMatchObject({
      [`bridge:${bridge}`]: 'PASS',
      [`firecracker-network:${table}`]: 'PASS',
      'ip-forward': 'PASS',
      'chroot:vm': 'PASS',
    });

    const again = await admin('provision');
    expect(again.code, again.stderr).toBe(0);
    expect((JSON.parse(again.stdout) as { made: string[] }).made).toEqual([]);

    // The bridge keeps its own address when a port with a lower MAC joins and leaves, as a VM's TAP
    // does: a bridge left to the kernel would take the port's, and the guests already running would
    // send to one the host drops.
    const fixed = bridgeMac(`10.${octet}.7.1`);
    expect(await macOf(ip, bridge)).toBe(fixed);
    const port = `kfp${tag}`;
    try {
      await joinLowPort(ip, bridge, port);
      expect(await macOf(ip, bridge)).toBe(fixed);
    } finally {
      await run('ip', ['link', 'del', 'dev', port]); // its peer goes with it
    }
    expect(await macOf(ip, bridge)).toBe(fixed);

    const down = await admin('teardown');
    expect(down.code, down.stderr + down.stdout).toBe(0);
    expect(await linkExists(bridge)).toBe(false);
    expect(await tableExists()).toBe(false);
    await expect(stat(join(dir, 'jailer-root'))).rejects.toThrow();
    expect((await readFile('/proc/sys/net/ipv4/ip_forward', 'utf8')).trim()).toBe(forwardAtStart);
  });

  it("teardown leaves a bridge that was there before provision: it is the operator's", async () => {
    await run('ip', ['link', 'add', bridge, 'type', 'bridge']);
    const made = await admin('provision');
    expect(made.code, made.stderr).toBe(0);
    expect((JSON.parse(made.stdout) as { record: { bridge?: string } }).record.bridge).toBeUndefined();
    const down = await admin('teardown');
    expect(down.code, down.stderr).toBe(0);
    expect(await linkExists(bridge)).toBe(true);
    // The gateway address provision added is gone again.
    const { stdout } = await run('ip', ['-o', '-4', 'addr', 'show', 'dev', bridge]);
    expect(stdout).not.toMatch(`10.${octet}.7.1/24`);
    expect(await tableExists()).toBe(false);
  });
});
