import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { freePort } from '../helpers/orch-process.js';
import { AGENT_BIN, NODE, ORCH_BIN, ROOT, alive, eventually, runNode } from '../helpers/orchestrator.js';

/**
 * Power-loss durability of the embedded store, seen from the kernel's side: the orchestrator runs
 * under strace, jobs run to the end, and in the trace each result's acknowledgement frame to the
 * agent is preceded, since the job was handed out, by an fdatasync of a write-ahead log segment.
 * With KICI_DATA_SYNC=off there is none, and the test fails.
 */

let dir: string;
let agent: ReturnType<typeof runNode> | undefined;
let tracedPid: number | undefined;

afterAll(async () => {
  if (agent?.child.pid && alive(agent.child.pid)) agent.child.kill('SIGKILL');
  if (tracedPid && alive(tracedPid)) process.kill(tracedPid, 'SIGKILL');
  if (dir) await rm(dir, { recursive: true, force: true });
});

const JOBS = 8;

describe('a stored result is on stable storage before it is acknowledged', () => {
  it('syncs the write-ahead log before each job.finished.ack frame', async () => {
    dir = await mkdtemp(join(tmpdir(), 'kici-walsync-'));
    const trace = join(dir, 'trace.txt');
    const port = await freePort();
    const url = `http://127.0.0.1:${port}`;
    const strace = spawn(
      'strace',
      [
        '-f',
        '-yy',
        '-s',
        '256',
        '-e',
        'trace=fdatasync,fsync,pwrite64,write,writev,sendto,sendmsg',
        '-o',
        trace,
        NODE,
        ORCH_BIN,
        'serve',
        '--listen',
        `127.0.0.1:${port}`,
        '--data-dir',
        join(dir, 'data'),
      ],
      { cwd: ROOT, env: { ...process.env, KICI_LOG_LEVEL: 'warn' }, stdio: 'ignore' },
    );
    const straceExit = new Promise<number | null>((r) => strace.on('exit', (code) => r(code)));
    await eventually(
      async () => (await fetch(`${url}/readyz`).catch(() => undefined))?.status === 200,
      // A first start under strace -f (every write of the embedded database's initdb traced) on a
      // busy 2-core host has taken over a minute.
      180_000,
      'ready',
    );
    // strace's only child is the orchestrator.
    tracedPid = Number(
      (await readFile(`/proc/${strace.pid}/task/${strace.pid}/children`, 'utf8')).trim().split(' ')[0],
    );
    const token = (await readFile(process.env.KICI_ADMIN_TOKEN_FILE!, 'utf8')).trim();
    const api = async (method: string, path: string, body?: unknown) => {
      const res = await fetch(`${url}${path}`, {
        method,
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
        ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
      });
      return { status: res.status, body: (await res.json()) as Record<string, unknown> };
    };
    const tok = await api('POST', '/api/v1/agents/tokens', { labels: ['linux', 'walsync'], agentId: 'ws-1' });
    agent = runNode([AGENT_BIN], {
      KICI_ORCHESTRATOR_URL: `ws://127.0.0.1:${port}/ws`,
      KICI_AGENT_ID: 'ws-1',
      KICI_AGENT_TOKEN: String(tok.body.token),
      KICI_LABELS: 'linux,walsync',
    });
    const jobs = Object.fromEntries(
      Array.from({ length: JOBS }, (_, i) => [
        `j${i}`,
        { runsOn: ['walsync'], steps: [{ run: `echo ${i}` }] },
      ]),
    );
    const run = await api('POST', '/api/v1/runs', { jobs });
    expect(run.status).toBe(201);
    const ids = (run.body.jobs as { id: string }[]).map((j) => j.id);
    for (const id of ids)
      await eventually(
        async () => (await api('GET', `/api/v1/jobs/${id}`)).body.state === 'succeeded',
        120_000,
        `job ${id} succeeded`,
      );
    agent.child.kill('SIGTERM');
    await agent.exited;
    process.kill(tracedPid, 'SIGTERM');
    expect(await straceExit).toBe(0);

    const lines = (await readFile(trace, 'utf8')).split('\n');
    const walSync = /(fdatasync|fsync)\(\d+<[^>]*\/pg_wal\/[0-9A-F]{24}>\) += 0/;
    // Between the frame that hands a job to the agent and the frame that acknowledges its result,
    // the result's commit happened: the log must have been synced in that stretch. (Other
    // statements can write the log between a commit's sync and the ack's send, so "the last
    // write before the ack was synced" would be too strict a reading of the trace.)
    const assignedAt = new Map<string, number>();
    const syncs: number[] = [];
    const acked = new Set<string>();
    lines.forEach((line, i) => {
      if (walSync.test(line)) syncs.push(i);
      if (!/TCP/.test(line)) return;
      if (line.includes('job.assign'))
        for (const id of ids) if (line.includes(id) && !assignedAt.has(id)) assignedAt.set(id, i);
      const ack = /\\"type\\":\\"job\.finished\.ack\\",\\"jobId\\":\\"([^\\]+)\\"/.exec(line);
      if (!ack) return;
      const id = ack[1]!;
      acked.add(id);
      const from = assignedAt.get(id);
      expect(from, `the assignment of ${id} is in the trace`).toBeDefined();
      expect(
        syncs.some((at) => at > from! && at < i),
        `a sync of the log between the assignment and the ack of ${id}`,
      ).toBe(true);
    });
    expect([...acked].sort()).toEqual([...ids].sort());
  }, 300_000);
});
