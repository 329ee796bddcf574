import { execFile } from 'node:child_process';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { createStore, openDatabase } from '../../src/store/index.js';
import { adminApi, freePort, killServe, tail, type ServeProcess } from '../helpers/crash.js';
import { freshDataDir } from '../helpers/data-dir.js';
import {
  ADMIN_BIN,
  eventually,
  ORCH_BIN,
  runNode,
  writeConfig,
  type JobBody,
} from '../helpers/orchestrator.js';
import { deleteLink, qemuPidsUnder, tapsOn, vmConfig } from '../helpers/vm.js';

/**
 * Kill -9 of the orchestrator (a real `serve` process) while a VM runs a job. After the restart the
 * VM is adopted (its agent reconnects and the job ends) or reaped, and its lease, TAP and overlay
 * are gone once it is: nothing leaks.
 */
const exec = promisify(execFile);
const BRIDGE = 'vmk-br0';
const TABLE = 'vmk-t';
const SUBNET = '10.231.10';

let first: ServeProcess | undefined;
let second: ServeProcess | undefined;
let base: string | undefined;
let dataDir: string | undefined;
afterAll(async () => {
  await killServe(first);
  await killServe(second);
  if (base) for (const pid of await qemuPidsUnder(base)) process.kill(pid, 'SIGKILL');
  await deleteLink(BRIDGE);
  await exec('nft', ['delete', 'table', 'inet', TABLE]).catch(() => {});
  if (base) await rm(base, { recursive: true, force: true });
  if (dataDir) await rm(dataDir, { recursive: true, force: true });
});

/** `serve` listening on every address, so VMs reach it on the bridge gateway. */
async function serve(config: string, port: number, dir: string): Promise<ServeProcess> {
  const proc = runNode(
    [ORCH_BIN, 'serve', '--config', config, '--listen', `0.0.0.0:${port}`, '--data-dir', dir],
    { KICI_LOG_LEVEL: 'info' },
  );
  const ready = await eventually(
    () => {
      const m = /"url":"(http:[^"]+)"/.exec(proc.output().stdout);
      if (m) return m;
      if (proc.child.exitCode !== null)
        throw new Error(`serve exited\n${tail(proc.output().stdout)}\n${tail(proc.output().stderr)}`);
      return undefined;
    },
    60_000,
    'serve ready',
  );
  return Object.assign(proc, { pid: proc.child.pid!, url: ready[1]! });
}

describe('kill -9 of the orchestrator with a VM running', () => {
  it('the restarted orchestrator adopts the VM, the job ends, and lease, TAP and overlay are gone', async () => {
    base = await mkdtemp(join(tmpdir(), 'kici-vmk-'));
    dataDir = await freshDataDir();
    const config = await writeConfig(
      vmConfig({ name: 'vmk', bridge: BRIDGE, subnet: SUBNET, base, table: TABLE }),
    );
    const port = await freePort();
    first = await serve(config, port, dataDir);
    const token = (await readFile(process.env.KICI_ADMIN_TOKEN_FILE!, 'utf8')).trim();
    const api = adminApi(first.url, token);
    const run = await api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
      jobs: { long: { runsOn: ['linux', 'vmk'], steps: [{ run: 'echo started; sleep 15; echo survived' }] } },
    });
    expect(run.status).toBe(201);
    const jobId = run.body.jobs[0]!.id;
    await eventually(
      async () => (await api<JobBody>('GET', `/api/v1/jobs/${jobId}`)).body.state === 'running',
      120_000,
      'the job to run in the VM',
    );
    const [vmPid] = await qemuPidsUnder(base);
    expect(vmPid).toBeGreaterThan(0);
    const [vmId] = await readdir(join(base, 'firecracker'));

    // kici-admin firecracker list shows the VM with its address, TAP, VMM pid and connected agent.
    const admin = runNode([
      ADMIN_BIN,
      '--server',
      first.url,
      '--token',
      token,
      'firecracker',
      'list',
      '--json',
    ]);
    expect((await admin.exited).code, admin.output().stderr).toBe(0);
    const listed = JSON.parse(admin.output().stdout) as Record<string, unknown>[];
    expect(listed).toEqual([
      expect.objectContaining({
        scaler: 'vmk',
        agentId: vmId,
        ip: `${SUBNET}.2`,
        tap: `kici-${vmId!.slice(-8)}`,
        pid: vmPid,
        agentConnected: true,
        boundJobId: jobId,
      }),
    ]);

    process.kill(first.pid, 'SIGKILL');
    await first.exited;
    // The VM does not die with the orchestrator.
    expect(await qemuPidsUnder(base)).toEqual([vmPid]);

    second = await serve(config, port, dataDir);
    const api2 = adminApi(second.url, token);
    const job = await eventually(
      async () => {
        const j = (await api2<JobBody>('GET', `/api/v1/jobs/${jobId}`)).body;
        return ['succeeded', 'failed', 'cancelled', 'timed-out'].includes(j.state) ? j : undefined;
      },
      120_000,
      'the job to end after the restart',
    );
    const out = second.output().stdout;
    expect(out).toMatch(/adopted a running VM|"adopted":1/);
    expect(job.state, `${job.reason}`).toBe('succeeded');

    // Once the job is done the VM is destroyed, and nothing of it is left on the host.
    await eventually(async () => (await qemuPidsUnder(base!)).length === 0, 30_000, 'qemu gone');
    await eventually(async () => (await tapsOn(BRIDGE)).length === 0, 10_000, 'tap gone');
    await eventually(
      async () => (await readdir(join(base!, 'firecracker'))).length === 0,
      10_000,
      'dir gone',
    );
    expect(vmId).toMatch(/^scaler-/);
    process.kill(second.pid, 'SIGTERM');
    await second.exited;
    const db = await openDatabase({ dataDir });
    try {
      const leases = await createStore(db.db).db.selectFrom('ip_allocations').selectAll().execute();
      expect(leases).toEqual([]);
    } finally {
      await db.close();
    }
  });
});
