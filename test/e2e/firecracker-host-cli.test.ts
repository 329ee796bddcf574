import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { stringify } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN_BIN, bareMetalConfig, runNode } from '../helpers/orchestrator.js';

/**
 * `kici-admin firecracker verify | teardown` as an operator runs them, without changing the host's
 * network: verify only reads (a bridge and a table no one made fail), and teardown with no record
 * removes nothing. Provision changes the network, so it is tested in the system tier's namespace.
 */

let dir = '';
let vmConfig = '';
let bmConfig = '';
const tag = randomBytes(3).toString('hex');

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kici-fc-cli-'));
  await writeFile(join(dir, 'firecracker'), '#!/bin/sh\n');
  await chmod(join(dir, 'firecracker'), 0o755);
  await writeFile(join(dir, 'vmlinux'), 'kernel');
  vmConfig = join(dir, 'vm.yaml');
  await writeFile(
    vmConfig,
    stringify({
      version: 1,
      firecracker: { bridgeName: `kfe${tag}`, table: `kfe_${tag}` },
      scalers: [
        {
          name: 'vm',
          type: 'firecracker',
          maxAgents: 1,
          firecrackerPath: join(dir, 'firecracker'),
          jailerPath: join(dir, 'no-jailer'),
          kernelPath: join(dir, 'vmlinux'),
          chrootBaseDir: join(dir, 'chroot'),
          uid: 1000,
          gid: 1000,
          labelSets: [{ labels: ['linux', 'vm'], rootfsPath: join(dir, 'rootfs.ext4') }],
        },
      ],
    }),
  );
  bmConfig = join(dir, 'bm.yaml');
  await writeFile(bmConfig, stringify(bareMetalConfig()));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

const fcCli = (...args: string[]) => runNode([ADMIN_BIN, 'firecracker', ...args]).exited;

describe('kici-admin firecracker verify and teardown', () => {
  it('verify prints PASS/WARN/FAIL rows with their fix and exits 1 on a FAIL', async () => {
    const r = await fcCli('verify', '--config', vmConfig);
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(/^STATUS\s+CHECK\s+MESSAGE\s+FIX/);
    expect(r.stdout).toMatch(
      new RegExp(
        `FAIL\\s+bridge:kfe${tag}\\s+bridge kfe${tag} does not exist\\s+run kici-admin firecracker provision`,
      ),
    );
    expect(r.stdout).toMatch(/PASS\s+firecracker:vm/);
    expect(r.stdout).toMatch(/FAIL\s+jailer:vm\s+\S+no-jailer is missing or not executable/);
    expect(r.stdout).toMatch(/WARN\s+chroot:vm/);
    const json = await fcCli('verify', '--config', vmConfig, '--json');
    expect(json.code).toBe(1);
    const body = JSON.parse(json.stdout) as { ok: boolean; rows: { name: string; status: string }[] };
    expect(body.ok).toBe(false);
    expect(body.rows.find((x) => x.name === `firecracker-network:kfe_${tag}`)?.status).toBe('FAIL');
  });

  it('a config without a VM scaler is a failure (exit 1); a missing config is a usage error (exit 2)', async () => {
    const none = await fcCli('verify', '--config', bmConfig, '--json');
    expect(none.code).toBe(1);
    expect(JSON.parse(none.stdout)).toMatchObject({
      error: expect.stringMatching(/no scaler of type firecracker/),
    });
    const missing = await runNode([ADMIN_BIN, 'firecracker', 'provision'], { KICI_SCALER_CONFIG_PATH: '' })
      .exited;
    expect(missing.code).toBe(2);
    expect(missing.stderr).toMatch(/pass --config <scalers.yaml>/);
  });

  it('teardown with no record removes nothing', async () => {
    const r = await fcCli('teardown', '--record', join(dir, 'none.json'));
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toBe('nothing to remove: provision made nothing here\n');
  });
});
