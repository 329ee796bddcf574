import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { freshDataDir } from '../helpers/data-dir.js';
import {
  adminApi,
  agentEnvNeedle,
  agentProcesses,
  freePort,
  killAgentsOf,
  killServe,
  startServe,
  tail,
  type ServeProcess,
} from '../helpers/crash.js';
import { bareMetalConfig, eventually, writeConfig } from '../helpers/orchestrator.js';
import { pidsWithEnv } from '../helpers/processes.js';

/**
 * SIGTERM on `kici-orchestrator serve` drains (running jobs finish, nothing new starts, /readyz
 * says draining); a second signal or the drain timeout stops at once and leaves the running agents
 * to the next start, which re-adopts them. No job is lost, run twice or failed.
 */

interface Job {
  id: string;
  state: string;
  reason: string | null;
}
interface Run {
  counts: Record<string, number>;
  jobs: Job[];
}

const FINAL = ['succeeded', 'failed', 'cancelled', 'timed-out', 'no-backend'];
let serves: ServeProcess[] = [];
let port: number | undefined;
const dirs: string[] = [];

afterEach(async () => {
  for (const s of serves) await killServe(s);
  if (port !== undefined) {
    const leftover = await killAgentsOf(port);
    if (leftover.length)
      console.log(`[rolling-restart] clean-up killed leftover pids: ${leftover.join(' ')}`);
  }
  for (const d of dirs.splice(0)) await rm(d, { recursive: true, force: true });
  serves = [];
  port = undefined;
});

/** `start|end <jobId>` lines of ran.log: how often each job's step started (or ended). */
function countLines(text: string, kind: 'start' | 'end'): Map<string, number> {
  const m = new Map<string, number>();
  for (const line of text.split('\n')) {
    const [k, id] = line.trim().split(' ');
    if (k === kind && id) m.set(id, (m.get(id) ?? 0) + 1);
  }
  return m;
}

/** One serve on a fixed port and data dir, and a burst of jobs whose steps log to ran.log. */
async function setup(env: NodeJS.ProcessEnv = {}) {
  port = await freePort();
  const dataDir = await freshDataDir();
  const work = await mkdtemp(join(tmpdir(), 'kici-rolling-'));
  const config = await writeConfig(bareMetalConfig({ maxAgents: 4 }));
  dirs.push(dataDir, work, dirname(config));
  const ranLog = join(work, 'ran.log');
  const gate = join(work, 'gate');
  await writeFile(ranLog, '');
  const start = async () => {
    const s = await startServe({ config, port: port!, dataDir, env });
    serves.push(s);
    return s;
  };
  const first = await start();
  const token = (await readFile(process.env.KICI_ADMIN_TOKEN_FILE!, 'utf8')).trim();
  const api = adminApi(first.url, token);
  /**
   * Each step runs for `sleepSeconds`, or with 'gate' until the test calls `openGate()`: a step
   * that must outlast a stop then lasts exactly as long as the test needs, not a guessed time.
   */
  const submit = async (jobs: number, length: number | 'gate') => {
    const wait = length === 'gate' ? `while [ ! -e '${gate}' ]; do sleep 0.05; done` : `sleep ${length}`;
    const spec: Record<string, unknown> = {};
    for (let i = 0; i < jobs; i++) {
      spec[`j${String(i).padStart(2, '0')}`] = {
        runsOn: ['linux', i % 2 ? 'large' : 'small'],
        steps: [
          {
            run: `echo "start $KICI_JOB_ID" >> '${ranLog}'; ${wait}; echo "end $KICI_JOB_ID" >> '${ranLog}'`,
          },
        ],
      };
    }
    const res = await api<{ runId: string; jobs: { id: string }[] }>('POST', '/api/v1/runs', {
      name: 'rolling',
      jobs: spec,
    });
    expect(res.status).toBe(201);
    return { runId: res.body.runId, ids: res.body.jobs.map((j) => j.id) };
  };
  const runOf = async (runId: string) => (await api<Run>('GET', `/api/v1/runs/${runId}`)).body;
  const openGate = () => writeFile(gate, '');
  return { first, start, api, submit, openGate, runOf, ranLog, needle: agentEnvNeedle(port) };
}

async function readyz(url: string): Promise<{ status: number; body: { status?: string } }> {
  try {
    const res = await fetch(`${url}/readyz`, { signal: AbortSignal.timeout(2_000) });
    return { status: res.status, body: (await res.json()) as { status?: string } };
  } catch {
    return { status: 0, body: {} };
  }
}

/** After the restart: every job succeeded, exactly once, and nothing was failed by the restart. */
async function expectAllSucceededOnce(
  s: Awaited<ReturnType<typeof setup>>,
  runId: string,
  ids: string[],
  restarted: ServeProcess,
): Promise<void> {
  let last: Run | undefined;
  try {
    await eventually(
      async () => {
        last = await s.runOf(runId);
        return last.jobs.every((j) => FINAL.includes(j.state));
      },
      120_000,
      'every job to reach a final state',
    );
  } catch (err) {
    console.log(`[rolling-restart] restarted serve output:\n${tail(restarted.output().stdout, 60)}`);
    throw err;
  }
  const jobs = last!.jobs;
  expect(jobs.map((j) => j.id).sort()).toEqual([...ids].sort());
  expect(jobs.filter((j) => j.state !== 'succeeded')).toEqual([]);
  const text = await readFile(s.ranLog, 'utf8');
  const starts = countLines(text, 'start');
  const ends = countLines(text, 'end');
  for (const id of ids) expect.soft([starts.get(id), ends.get(id)], `${id}: start/end lines`).toEqual([1, 1]);
}

/** SIGTERM the last serve; it must exit 0 and leave no agent (nor step) process behind. */
async function stopCleanly(s: Awaited<ReturnType<typeof setup>>, serve: ServeProcess): Promise<void> {
  await eventually(async () => (await pidsWithEnv(s.needle)).length === 0, 30_000, 'agents to leave');
  process.kill(serve.pid, 'SIGTERM');
  const done = await serve.exited;
  expect(done.code, tail(done.stderr)).toBe(0);
  expect(await pidsWithEnv(s.needle)).toEqual([]);
}

describe('rolling restart of a real serve process with bare-metal agents', () => {
  it('SIGTERM mid-burst drains, a restart on the same data dir runs the rest: 30 of 30 once', async () => {
    const s = await setup();
    const { runId, ids } = await s.submit(30, 1);
    const before = await eventually(
      async () => {
        const r = await s.runOf(runId);
        const c = r.counts;
        return (c.succeeded ?? 0) >= 4 && (c.running ?? 0) >= 2 && (c.queued ?? 0) >= 4 ? r : undefined;
      },
      90_000,
      'a burst in progress',
    );
    const termAt = Date.now();
    process.kill(s.first.pid, 'SIGTERM');
    const draining = await eventually(async () => {
      const r = await readyz(s.first.url);
      return r.status === 503 && r.body.status === 'draining' ? r : undefined;
    }, 5_000);
    expect(draining.body).toEqual({ status: 'draining' });
    const exited = await s.first.exited;
    const exitedAfterMs = Date.now() - termAt;
    expect(exited.code, tail(exited.stderr)).toBe(0);
    expect(exited.stdout).toContain('draining');
    // The drain let every started step end, and started nothing new: queued jobs stayed queued.
    const text = await readFile(s.ranLog, 'utf8');
    const started = countLines(text, 'start');
    expect([...started.keys()].filter((id) => !countLines(text, 'end').has(id))).toEqual([]);
    expect(started.size).toBeLessThan(30);
    console.log(
      `[rolling-restart] at SIGTERM ${JSON.stringify(before.counts)}; drained and exited in ${exitedAfterMs} ms; ` +
        `steps run before the stop: ${started.size}`,
    );
    // A stop after a full drain leaves no agent behind (idle and spawning ones are torn down).
    await eventually(async () => (await agentProcesses(await pidsWithEnv(s.needle))).length === 0, 15_000);

    const second = await s.start();
    await expectAllSucceededOnce(s, runId, ids, second);
    await stopCleanly(s, second);
  }, 240_000);

  it('a second SIGTERM stops at once; running agents live on and the next start re-adopts them', async () => {
    // A drain far longer than the test: the gated jobs never end while it lasts, so only the second
    // signal can have stopped the server (an event, not a stopwatch, shows it).
    const s = await setup({ KICI_DRAIN_TIMEOUT: '3600' });
    const { runId, ids } = await s.submit(6, 'gate');
    await eventually(async () => ((await s.runOf(runId)).counts.running ?? 0) >= 3, 60_000, '3 running jobs');
    const agentsBefore = await agentProcesses(await pidsWithEnv(s.needle));
    process.kill(s.first.pid, 'SIGTERM');
    await eventually(async () => (await readyz(s.first.url)).body.status === 'draining', 5_000);
    process.kill(s.first.pid, 'SIGTERM');
    const exited = await s.first.exited;
    expect(exited.code, tail(exited.stderr)).toBe(0);
    expect(exited.stdout + exited.stderr).toContain('second stop signal: stopping now');
    expect(exited.stdout + exited.stderr).not.toContain('drain timeout reached');
    // The agents that were running jobs are still there, their steps not yet done.
    const alive = await agentProcesses(await pidsWithEnv(s.needle));
    expect(alive.filter((pid) => agentsBefore.includes(pid)).length).toBeGreaterThanOrEqual(3);

    const second = await s.start();
    const ready = JSON.parse(
      second
        .output()
        .stdout.split('\n')
        .find((l) => l.includes('"url":"http'))!,
    ) as {
      adopted?: { adopted: number };
    };
    expect(ready.adopted?.adopted).toBeGreaterThanOrEqual(3);
    await s.openGate();
    await expectAllSucceededOnce(s, runId, ids, second);
    await stopCleanly(s, second);
  }, 240_000);

  it('the drain timeout (KICI_DRAIN_TIMEOUT=1) stops with jobs still running; the next start finishes them', async () => {
    const s = await setup({ KICI_DRAIN_TIMEOUT: '1' });
    const { runId, ids } = await s.submit(4, 'gate');
    await eventually(async () => ((await s.runOf(runId)).counts.running ?? 0) >= 2, 60_000, '2 running jobs');
    const t0 = Date.now();
    process.kill(s.first.pid, 'SIGTERM');
    const exited = await s.first.exited;
    expect(exited.code, tail(exited.stderr)).toBe(0);
    expect(Date.now() - t0).toBeLessThan(10_000);
    expect(exited.stdout).toContain('drain timeout reached');
    const second = await s.start();
    await s.openGate();
    await expectAllSucceededOnce(s, runId, ids, second);
    await stopCleanly(s, second);
  }, 240_000);
});
