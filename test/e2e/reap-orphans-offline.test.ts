/**
 * `kici-admin scaler reap-orphans` with no healthy orchestrator, as on a full data disk: the command
 * reads the scaler config, finds the VM directories whose VMM process is gone (a real process that
 * exited) and removes them, and spares the one whose VMM (a real running process) is alive. The data
 * dir cannot be written at all, and no admin token exists: neither is needed.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { access, mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeEach, describe, expect, it } from 'vitest';
import { ADMIN_BIN, runNode, writeConfig } from '../helpers/orchestrator.js';

let base = '';
let config = '';
let unwritable = '';
let live: ChildProcess | undefined;
const servers: Server[] = [];
const cleanup: string[] = [];

afterAll(async () => {
  live?.kill('SIGKILL');
  for (const s of servers) s.close();
  for (const d of cleanup) await rm(d, { recursive: true, force: true });
});

/** The pid of a real process that has exited (its VMM "crashed"). */
async function deadPid(): Promise<number> {
  const p = spawn('true');
  await new Promise((r) => p.on('exit', r));
  return p.pid!;
}

async function vmDir(id: string, pid: number, tap: string): Promise<string> {
  const dir = join(base, 'firecracker', id, 'root');
  await mkdir(dir, { recursive: true });
  await writeFile(join(dir, 'vmm.pid'), String(pid));
  await writeFile(join(dir, 'overlay.ext4'), Buffer.alloc(64 * 1024));
  const record = { agentId: id, scalerName: 'vm', labelSet: ['vm'], ip: '10.231.13.5', tap, startedAt: 1 };
  await writeFile(join(dir, 'vm.json'), JSON.stringify(record));
  return join(base, 'firecracker', id);
}

const exists = (p: string) =>
  access(p).then(
    () => true,
    () => false,
  );

/** An HTTP server standing for an orchestrator: its health answers, and the API calls it got. */
async function fakeOrchestrator(ready: boolean): Promise<{ url: string; calls: string[] }> {
  const calls: string[] = [];
  const s = createServer((req, res) => {
    calls.push(`${req.method} ${req.url}`);
    res.setHeader('content-type', 'application/json');
    if (req.url === '/healthz') return res.end('{"status":"ok"}');
    if (req.url === '/readyz') {
      res.statusCode = ready ? 200 : 503;
      return res.end(ready ? '{"status":"ready"}' : '{"status":"disk-low","problem":"data dir full"}');
    }
    res.end('{"dryRun":false,"items":[],"errors":[]}');
  });
  servers.push(s);
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${(s.address() as AddressInfo).port}`, calls };
}

/** Nothing listens on port 1: the orchestrator is down. */
function admin(args: string[], server = 'http://127.0.0.1:1') {
  return runNode([ADMIN_BIN, '--server', server, '--data-dir', unwritable, ...args], {
    KICI_ADMIN_TOKEN: '',
    KICI_ADMIN_TOKEN_FILE: join(unwritable, 'admin-token'),
    KICI_DATA_DIR: unwritable,
    KICI_SCALER_CONFIG_PATH: '',
  }).exited;
}

type Report = {
  dryRun: boolean;
  items: { scaler: string; agentId: string | null; ref: string }[];
  errors: unknown[];
  offline?: { reason: string };
};

beforeEach(async () => {
  base = await mkdtemp(join(tmpdir(), 'kici-reap-off-'));
  cleanup.push(base);
  // Under a regular file: no process, root included, can create or write anything there.
  await writeFile(join(base, 'not-a-dir'), '');
  unwritable = join(base, 'not-a-dir', 'data');
  config = await writeConfig({
    version: 1,
    firecracker: { bridgeName: 'roff-br-never', cidr: '10.231.13.0/24', gateway: '10.231.13.1' },
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
  cleanup.push(join(config, '..'));
});

describe('kici-admin scaler reap-orphans with the orchestrator stopped', () => {
  it('lists, then removes, the dead VM overlays; spares the running VM; never needs the data dir or a token', async () => {
    const dead = await vmDir('scaler-vm-dead0001', await deadPid(), 'kici-0000dead');
    live ??= spawn('sleep', ['300'], { stdio: 'ignore' });
    const running = await vmDir('scaler-vm-live0001', live.pid!, 'kici-0000beef');

    const listed = await admin(['scaler', 'orphans', '--config', config, '--json']);
    expect(listed.code, listed.stderr).toBe(0);
    const dry = JSON.parse(listed.stdout) as Report;
    expect(dry.dryRun).toBe(true);
    expect(dry.offline?.reason).toMatch(/no answer from http:\/\/127\.0\.0\.1:1\/healthz/);
    expect(dry.items.map((i) => i.agentId)).toEqual(['scaler-vm-dead0001']);
    expect(await exists(dead)).toBe(true);

    const reaped = await admin(['scaler', 'reap-orphans', '--config', config]);
    expect(reaped.code, reaped.stderr).toBe(0);
    expect(reaped.stdout).toMatch(/swept on this host without the orchestrator/);
    expect(reaped.stdout).toMatch(/removed 1:[\s\S]*scaler-vm-dead0001/);
    expect(await exists(dead)).toBe(false);
    expect(await readdir(join(running, 'root'))).toContain('overlay.ext4');
  });

  it('sweeps here when the orchestrator answers but is not ready (a full disk)', async () => {
    const dead = await vmDir('scaler-vm-dead0002', await deadPid(), 'kici-0000dea2');
    const fake = await fakeOrchestrator(false);
    const r = await admin(['scaler', 'reap-orphans', '--config', config, '--json'], fake.url);
    expect(r.code, r.stderr).toBe(0);
    const report = JSON.parse(r.stdout) as Report;
    expect(report.offline?.reason).toMatch(/not ready \(disk-low: data dir full\)/);
    expect(report.items.map((i) => i.agentId)).toEqual(['scaler-vm-dead0002']);
    expect(await exists(dead)).toBe(false);
    expect(fake.calls).not.toContain('POST /api/v1/scaler/reap-orphans?dryRun=false');
  });

  it('asks a healthy orchestrator to sweep, unless --force', async () => {
    const dead = await vmDir('scaler-vm-dead0003', await deadPid(), 'kici-0000dea3');
    const fake = await fakeOrchestrator(true);
    const env = ['--token', 'kici_at_test'];
    const asked = await admin([...env, 'scaler', 'reap-orphans', '--config', config, '--json'], fake.url);
    expect(asked.code, asked.stderr).toBe(0);
    expect(fake.calls).toContain('POST /api/v1/scaler/reap-orphans?dryRun=false');
    expect((JSON.parse(asked.stdout) as Report).offline).toBeUndefined();
    expect(await exists(dead)).toBe(true);

    const forced = await admin(['scaler', 'reap-orphans', '--force', '--config', config, '--json'], fake.url);
    expect(forced.code, forced.stderr).toBe(0);
    expect((JSON.parse(forced.stdout) as Report).offline?.reason).toBe('asked with --force');
    expect(await exists(dead)).toBe(false);
    expect(fake.calls.filter((c) => c.startsWith('POST'))).toHaveLength(1);
  });

  it('without a scaler config it is a usage error, as JSON under --json', async () => {
    const r = await admin(['scaler', 'reap-orphans', '--json']);
    expect(r.code).toBe(2);
    expect(r.stderr).toBe('');
    const body = JSON.parse(r.stdout) as { error: string };
    expect(body.error).toMatch(/--config <scalers\.yaml> or set KICI_SCALER_CONFIG_PATH/);
  });
});
