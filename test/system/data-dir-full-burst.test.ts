import { execFileSync } from 'node:child_process';
import { closeSync, constants, openSync, writeSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../helpers/orch-process.js';
import { MiB, mountLoopDataDir, watchHealth, type LoopDataDir } from '../helpers/loop-data-dir.js';
import { AGENT_BIN, ORCH_BIN, alive, eventually, runNode } from '../helpers/orchestrator.js';

/**
 * A data dir that runs out during a burst, down to its last MiB (a loop-mounted 256 MiB ext4
 * image; needs root). A job writes a large log while short jobs wait; the log's own growth crosses
 * the floor, then a filler takes all but the last MiB. Meanwhile /healthz answers every time,
 * /readyz says why it is not ready, no job fails, and the big job's result is kept. Once the
 * space is back every job succeeds with its whole log, and SIGTERM stops the process.
 * Then the same data dir and agents, with SIGTERM while the disk is still full (see the second test).
 */

let disk: LoopDataDir;
let port: number;
let url: string;
let orch: ReturnType<typeof runNode> | undefined;
const agents: ReturnType<typeof runNode>[] = [];

beforeAll(async () => {
  disk = await mountLoopDataDir(256);
  port = await freePort();
  url = `http://127.0.0.1:${port}`;
});
let passed = 0;
afterAll(async () => {
  if (orch && passed < 2)
    process.stderr.write(
      `orchestrator output (last 4000 characters):\n${orch.output().stderr.slice(-4000)}${orch.output().stdout.slice(-4000)}\n`,
    );
  for (const a of agents) if (a.child.pid && alive(a.child.pid)) a.child.kill('SIGKILL');
  if (orch?.child.pid && alive(orch.child.pid)) orch.child.kill('SIGKILL');
  await orch?.exited;
  await disk.unmount();
});

/** `serve` on the loop-mounted data dir and the one port the agents know; resolves once ready. */
async function serve(env: NodeJS.ProcessEnv = {}) {
  orch = runNode([ORCH_BIN, 'serve', '--listen', `127.0.0.1:${port}`, '--data-dir', join(disk.mnt, 'data')], {
    KICI_DATA_MIN_FREE_MB: '32',
    KICI_LOG_LEVEL: 'info',
    ...env,
  });
  await eventually(async () => (await fetch(`${url}/readyz`)).status === 200, 60_000, 'ready');
  return orch;
}

async function api(method: string, path: string, body?: unknown) {
  const token = (await readFile(process.env.KICI_ADMIN_TOKEN_FILE!, 'utf8')).trim();
  const res = await fetch(`${url}${path}`, {
    method,
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

/** Two static agents (big and small), started once: they outlive every restart of the server. */
async function startAgents() {
  if (agents.length) return agents;
  for (const id of ['dfb-big', 'dfb-small']) {
    const tok = await api('POST', '/api/v1/agents/tokens', { labels: ['linux', id], agentId: id });
    agents.push(
      runNode([AGENT_BIN], {
        KICI_ORCHESTRATOR_URL: `ws://127.0.0.1:${port}/ws`,
        KICI_AGENT_ID: id,
        KICI_AGENT_TOKEN: String(tok.body.token),
        KICI_LABELS: `linux,${id}`,
      }),
    );
  }
  return agents;
}

async function submit(jobs: Record<string, unknown>): Promise<Record<string, string>> {
  const run = await api('POST', '/api/v1/runs', { jobs });
  expect(run.status).toBe(201);
  return Object.fromEntries((run.body.jobs as { id: string; name: string }[]).map((j) => [j.name, j.id]));
}

const jobState = async (id: string) => (await api('GET', `/api/v1/jobs/${id}`)).body.state;

/** Every job succeeds; none is ever seen failed on the way. */
async function allSucceed(ids: Record<string, string>) {
  for (const id of Object.values(ids))
    await eventually(
      async () => {
        const state = await jobState(id);
        expect(state, `job ${id}`).not.toBe('failed');
        return state === 'succeeded';
      },
      180_000,
      `job ${id} succeeded`,
    );
}

/** The job's stored log, read page by page (lines after a given id). */
async function storedLog(jobId: string) {
  const lines: { id: number; line: string; stream: string }[] = [];
  for (;;) {
    const after = lines.length ? `?after=${lines.at(-1)!.id}` : '';
    const page = (await api('GET', `/api/v1/jobs/${jobId}/logs${after}`)).body.lines as typeof lines;
    if (!page.length) return lines;
    lines.push(...page);
  }
}

/**
 * Lets a job waiting on a FIFO go on. A blocking open would wait forever for a job that never
 * reached its `cat` (a plain writeFile hangs the test until its timeout, naming nothing), so the
 * FIFO is opened without blocking until the job's end of it is there.
 */
function openGate(fifo: string, what: string) {
  return eventually(
    () => {
      let fd: number;
      try {
        fd = openSync(fifo, constants.O_WRONLY | constants.O_NONBLOCK);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENXIO') return false; // no reader yet
        throw err;
      }
      try {
        writeSync(fd, 'go\n');
      } finally {
        closeSync(fd);
      }
      return true;
    },
    60_000,
    `${what} waiting on its gate`,
  );
}

/** Readyz answers disk-low (a store busy with a backlog may first answer store-unwritable). */
function diskLow(timeoutMs: number, what: string) {
  return eventually(
    async () => {
      const r = await fetch(`${url}/readyz`);
      const body = r.status === 503 ? ((await r.json()) as { status: string; problem: string }) : undefined;
      return body?.status === 'disk-low' ? body : undefined;
    },
    timeoutMs,
    what,
  );
}

describe('data dir full during a burst, down to the last MiB', () => {
  it('keeps answering, fails no job, loses no result, and finishes the run once space returns', async () => {
    await serve();
    const [bigAgent] = await startAgents();
    const health = watchHealth(url);

    // Leave 40 MiB over the floor: the big job's log (about 32 MB) crosses it by itself.
    disk.fill('filler-1', 72 * MiB);
    const big = {
      runsOn: ['dfb-big'],
      steps: [{ run: 'head -c 24000000 /dev/urandom | base64 -w 100; echo END-OF-LOG' }],
    };
    const small = { runsOn: ['dfb-small'], steps: [{ run: 'echo small' }] };
    const jobs: Record<string, unknown> = { big };
    for (let i = 0; i < 20; i++) jobs[`s${i}`] = small;
    const ids = await submit(jobs);

    health.phase = 'the big log fills the disk';
    const low = await diskLow(180_000, 'readyz 503 as the log fills the disk');
    expect(low.problem).toMatch(/below the 32 MiB floor/);
    health.phase = 'disk at its last MiB';
    disk.fill('filler-2', MiB);
    expect(disk.freeBytes()).toBeLessThan(2 * MiB);

    // The big job ends while the disk is full: the agent says so, and the job is not failed.
    await eventually(
      () => /job \S+ succeeded/.test(bigAgent!.output().stdout + bigAgent!.output().stderr),
      300_000,
      'the big job ran to its end',
    );
    expect((await fetch(`${url}/readyz`)).status).toBe(503);
    for (const id of Object.values(ids))
      expect(['queued', 'dispatched', 'running', 'succeeded'], `job ${id}`).toContain(await jobState(id));
    const refused = await api('POST', '/api/v1/runs', { jobs: { x: small } });
    expect(refused.status).toBe(503);

    health.phase = 'space returned';
    await disk.unfill();
    await eventually(async () => (await fetch(`${url}/readyz`)).status === 200, 60_000, 'ready again');
    await allSucceed(ids);
    health.phase = 'reading the big log';
    // Output held while the disk was full is written in slices once space returns, so its tail may
    // still be arriving when the job's result (stored at once) reads succeeded: read until it is there.
    let lines: Awaited<ReturnType<typeof storedLog>> = [];
    await eventually(
      async () => (lines = await storedLog(ids.big!)).at(-1)?.line === 'END-OF-LOG',
      120_000,
      'the whole big log stored',
    );
    expect(lines.filter((l) => l.line.length === 100).length).toBeGreaterThan(300_000);
    expect(lines.some((l) => /dropped while the data dir|were not stored/.test(l.line))).toBe(false);

    const { asked, bad } = await health.stop();
    expect(asked).toBeGreaterThan(10);
    expect(bad).toEqual([]);
    orch!.child.kill('SIGTERM');
    expect((await orch!.exited).code).toBe(0);
    passed++;
  }, 900_000);

  it('stops on SIGTERM while the disk is full; after a restart every job succeeds, once', async () => {
    // Same data dir and agents; the first test's server has stopped (killed here if it failed).
    if (orch?.child.pid && alive(orch.child.pid)) orch.child.kill('SIGKILL');
    await orch?.exited;
    await disk.unfill();
    // A short drain: SIGTERM finds a job running, which stays with its agent once the drain ends.
    let server = await serve({ KICI_DRAIN_TIMEOUT: '2' });
    const [bigAgent] = await startAgents();
    const health = watchHealth(url);
    // Jobs wait on FIFOs the test opens; each job marks that it ran, so a second run would show.
    const gate = { held: join(disk.dir, 'gate-held'), running: join(disk.dir, 'gate-running') };
    execFileSync('mkfifo', [gate.held, gate.running]);
    const ran = join(disk.dir, 'ran');
    const mark = (name: string) => `echo ${name} >> ${ran}`;
    const ids = await submit({
      // Its output comes while the disk is full, so it is held in memory, and it ends before SIGTERM.
      held: {
        runsOn: ['dfb-big'],
        steps: [{ run: `${mark('held')}; cat ${gate.held} >/dev/null; seq -f held-%g 20000; echo HELD-END` }],
      },
      // Still running at SIGTERM: its agent keeps it and brings it to the restarted server.
      running: {
        runsOn: ['dfb-small'],
        steps: [{ run: `${mark('running')}; cat ${gate.running} >/dev/null; echo running-done` }],
      },
    });
    // Both must be on their agents before the disk fills: from then on no new work is handed out.
    // (After the restart the agents come back one by one; the big one may still be reconnecting.)
    for (const name of ['held', 'running'] as const)
      await eventually(
        async () => (await jobState(ids[name]!)) === 'running',
        60_000,
        `the gated job ${name} running`,
      );
    // Queued behind it on the same agent, through the full disk, the stop and the restart.
    const queued = await submit(
      Object.fromEntries(
        [0, 1, 2].map((i) => [
          `q${i}`,
          { runsOn: ['dfb-small'], steps: [{ run: `${mark(`q${i}`)}; echo q-ran` }] },
        ]),
      ),
    );
    for (const id of Object.values(queued)) expect(await jobState(id)).toBe('queued');

    health.phase = 'disk at its last MiB';
    disk.fill('filler-3', MiB);
    await diskLow(30_000, 'readyz disk-low once the disk is full');
    await openGate(gate.held, 'the held job');
    await eventually(
      () =>
        new RegExp(`job ${ids.held} succeeded`).test(bigAgent!.output().stdout + bigAgent!.output().stderr),
      60_000,
      'the held job ran to its end',
    );
    // Its output is in the server's memory only: none of it is in the store.
    expect((await storedLog(ids.held!)).some((l) => l.line.startsWith('held-'))).toBe(false);
    const { asked, bad } = await health.stop();
    expect(asked).toBeGreaterThan(2);
    expect(bad).toEqual([]);

    const t0 = Date.now();
    server.child.kill('SIGTERM');
    const exit = await Promise.race([
      server.exited,
      new Promise<never>((_, reject) =>
        setTimeout(
          () => reject(new Error('no exit within 30 s of SIGTERM while the disk is full')),
          30_000,
        ).unref(),
      ),
    ]);
    expect(exit.code, exit.stderr.slice(-2000) + exit.stdout.slice(-2000)).toBe(0);
    const stopMs = Date.now() - t0;
    // The held output could not be stored: the log says how much of which job was dropped.
    const warned = /"jobs":(\{[^}]*\}),"lines":(\d+)[^\n]*was not stored/.exec(exit.stdout + exit.stderr);
    expect(warned, 'a log line about the output not stored').not.toBeNull();
    const droppedPerJob = JSON.parse(warned![1]!) as Record<string, number>;

    await disk.unfill();
    server = await serve();
    await openGate(gate.running, 'the running job');
    await allSucceed({ ...ids, ...queued });
    // Every job ran exactly once (none lost, none repeated), and its output is told truly.
    const marks = (await readFile(ran, 'utf8')).split('\n').filter(Boolean).sort();
    expect(marks).toEqual(['held', 'q0', 'q1', 'q2', 'running']);
    const heldLog = await storedLog(ids.held!);
    const stored = heldLog.filter((l) => l.stream !== 'system').length;
    const note = heldLog.find((l) => /lines of output were not stored/.test(l.line));
    expect(note?.line).toBe(
      `${droppedPerJob[ids.held!]} lines of output were not stored: the orchestrator stopped while the data dir was nearly full`,
    );
    expect(stored + droppedPerJob[ids.held!]!).toBe(20_001);
    expect((await storedLog(ids.running!)).map((l) => l.line)).toContain('running-done');
    for (const id of Object.values(queued))
      expect((await storedLog(id)).map((l) => l.line)).toContain('q-ran');
    process.stderr.write(`SIGTERM while the data dir was full: exited in ${stopMs} ms (drain 2 s)\n`);

    server.child.kill('SIGTERM');
    expect((await server.exited).code).toBe(0);
    passed++;
  }, 300_000);
});
