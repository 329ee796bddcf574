import { execFileSync } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../helpers/orch-process.js';
import { AGENT_BIN, ORCH_BIN, alive, eventually, runNode } from '../helpers/orchestrator.js';

/**
 * A full data dir on a real small filesystem (a loop-mounted 400 MiB ext4 image; needs root):
 * as a filler file eats the space, /readyz turns 503 "disk-low" with the reason before the
 * embedded database runs out, /healthz keeps answering, new runs are refused; once the filler
 * is gone, new work is taken and runs; SIGTERM stops the process throughout.
 */

let dir: string;
let mnt: string;
let orch: ReturnType<typeof runNode> | undefined;
let agent: ReturnType<typeof runNode> | undefined;
const sh = (cmd: string, args: string[]) => execFileSync(cmd, args, { stdio: 'pipe' });

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kici-diskfull-'));
  mnt = join(dir, 'mnt');
  sh('truncate', ['-s', '400M', join(dir, 'fs.img')]);
  sh('mkfs.ext4', ['-q', '-F', join(dir, 'fs.img')]);
  sh('mkdir', ['-p', mnt]);
  sh('mount', ['-o', 'loop', join(dir, 'fs.img'), mnt]);
});
afterAll(async () => {
  if (agent?.child.pid && alive(agent.child.pid)) agent.child.kill('SIGKILL');
  if (orch?.child.pid && alive(orch.child.pid)) orch.child.kill('SIGKILL');
  await orch?.exited;
  try {
    sh('umount', [mnt]);
  } catch {
    sh('umount', ['-l', mnt]);
  }
  await rm(dir, { recursive: true, force: true });
});

describe('data dir running out of space', () => {
  it('stops taking work with a reason, keeps answering, and resumes when space returns', async () => {
    const port = await freePort();
    const url = `http://127.0.0.1:${port}`;
    const dataDir = join(mnt, 'data');
    orch = runNode([ORCH_BIN, 'serve', '--listen', `127.0.0.1:${port}`, '--data-dir', dataDir], {
      KICI_DATA_MIN_FREE_MB: '128',
      KICI_LOG_LEVEL: 'info',
    });
    await eventually(async () => (await fetch(`${url}/readyz`)).status === 200, 90_000, 'ready');
    // The bootstrap token lives outside the data dir, in the file the tests' global set-up names.
    const token = (await readFile(process.env.KICI_ADMIN_TOKEN_FILE!, 'utf8')).trim();
    const api = async (method: string, path: string, body?: unknown) => {
      const res = await fetch(`${url}${path}`, {
        method,
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
        ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
      });
      return { status: res.status, body: (await res.json()) as Record<string, unknown> };
    };
    const tok = await api('POST', '/api/v1/agents/tokens', {
      labels: ['linux', 'diskfull'],
      agentId: 'df-1',
    });
    agent = runNode([AGENT_BIN], {
      KICI_ORCHESTRATOR_URL: `ws://127.0.0.1:${port}/ws`,
      KICI_AGENT_ID: 'df-1',
      KICI_AGENT_TOKEN: String(tok.body.token),
      KICI_LABELS: 'linux,diskfull',
    });
    const job = { runsOn: ['diskfull'], steps: [{ run: 'seq 1 2000' }] };

    // Leave about 100 MiB free: under the floor, well above what the database needs.
    const free = Number(execFileSync('df', ['--output=avail', '-B1', mnt]).toString().split('\n')[1]);
    const filler = join(mnt, 'filler');
    sh('fallocate', ['-l', String(free - 100 * 1024 * 1024), filler]);
    const low = await eventually(
      async () => {
        const r = await fetch(`${url}/readyz`);
        return r.status === 503 ? ((await r.json()) as { status: string; problem: string }) : undefined;
      },
      10_000,
      'readyz 503',
    );
    expect(low.status).toBe('disk-low');
    expect(low.problem).toMatch(/MiB free, below the 128 MiB floor/);
    expect((await fetch(`${url}/healthz`)).status).toBe(200);
    const refused = await api('POST', '/api/v1/runs', { jobs: { a: job } });
    expect(refused.status).toBe(503);

    await rm(filler);
    await eventually(async () => (await fetch(`${url}/readyz`)).status === 200, 10_000, 'ready again');
    const run = await api('POST', '/api/v1/runs', { jobs: { a: job } });
    expect(run.status).toBe(201);
    const id = (run.body.jobs as { id: string }[])[0]!.id;
    const done = await eventually(
      async () => {
        const r = await api('GET', `/api/v1/jobs/${id}`);
        return r.body.state === 'succeeded' ? r.body : undefined;
      },
      60_000,
      'the job succeeded',
    );
    expect(done.state).toBe('succeeded');

    orch.child.kill('SIGTERM');
    const exit = await orch.exited;
    expect(exit.code).toBe(0);
  }, 180_000);
});
