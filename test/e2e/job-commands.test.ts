import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  ADMIN_BIN,
  bareMetalConfig,
  runNode,
  startTestOrchestrator,
  type TestOrchestrator,
} from '../helpers/orchestrator.js';

/**
 * Jobs: `job retry`, `job get` with steps and a reason, `job logs` with step frames and
 * --timestamps, `job submit --wait --timeout/--follow`. The real kici-admin against a real
 * orchestrator whose bare-metal scaler spawns real agents.
 */

let t: TestOrchestrator;
let files: string;
const admin = (args: string[]) =>
  runNode([ADMIN_BIN, ...args], { KICI_SERVER_URL: t.orch.url, KICI_ADMIN_TOKEN: t.orch.adminToken }).exited;
const ISO = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z /;

async function runFile(name: string, jobs: Record<string, unknown>): Promise<string> {
  const path = join(files, name);
  await writeFile(path, stringify({ jobs }));
  return path;
}

const threeSteps = {
  runsOn: ['linux', 'small'],
  steps: [
    { name: 'prep', run: 'echo preparing' },
    { name: 'compile', run: 'echo compiling; echo warn >&2' },
    { name: 'check', run: 'echo checking; exit 2' },
  ],
};

let failedJob = '';

beforeAll(async () => {
  files = await mkdtemp(join(tmpdir(), 'kici-job-cmds-'));
  t = await startTestOrchestrator({ config: bareMetalConfig() });
});
afterAll(async () => {
  await t?.stop();
  await rm(files, { recursive: true, force: true });
});

describe('job submit --wait', () => {
  it('--follow streams each job log prefixed by its name, with step frames, then the states', async () => {
    const path = await runFile('follow.yaml', { build: threeSteps });
    const res = await admin(['job', 'submit', path, '--wait', '--follow']);
    expect(res.code).toBe(1);
    const out = res.stdout.split('\n');
    const at = (s: string) => out.findIndex((l) => l === s);
    const order = [
      'build | ── step 1/3 "prep" ──',
      'build | preparing',
      'build | ── step 2/3 "compile" ──',
      'build | compiling',
      'build | ── step 3/3 "check" ──',
      'build | checking',
    ].map(at);
    expect(
      order.every((i) => i >= 0),
      res.stdout,
    ).toBe(true);
    expect([...order].sort((a, b) => a - b)).toEqual(order);
    expect(res.stdout).toMatch(/^build \| ── step "prep" exited 0 in \d+(ms|\.\ds) ──$/m);
    expect(res.stdout).toMatch(/^build \| ── step "check" exited 2 in \d+(ms|\.\ds) ──$/m);
    // A failed job's reason is never "-": the failing step and its exit code.
    const row = /^(j-[0-9a-f]{12})\s+build\s+failed\s+2\s+step "check" exited with 2$/m.exec(res.stdout);
    expect(row, res.stdout).not.toBeNull();
    failedJob = row![1]!;
  });

  it('--follow --json is one JSON record per line: log lines, then the result', async () => {
    const path = await runFile('follow-json.yaml', {
      a: { runsOn: ['linux', 'small'], steps: [{ run: 'echo from-a' }] },
    });
    const res = await admin(['job', 'submit', path, '--wait', '--follow', '--json']);
    expect(res.code).toBe(0);
    const records = res.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(records).toContainEqual(expect.objectContaining({ type: 'log', job: 'a', line: 'from-a' }));
    const last = records.at(-1)!;
    expect(last).toMatchObject({
      type: 'result',
      timedOut: false,
      jobs: [{ name: 'a', state: 'succeeded' }],
    });
  });

  it('--timeout gives up with exit 1, a clear message and the states; the jobs keep running', async () => {
    const path = await runFile('slow.yaml', {
      slow: { runsOn: ['linux', 'small'], steps: [{ run: 'sleep 60' }] },
    });
    // The three waits are independent runs of the same file, so they wait out their timeouts together.
    const started = Date.now();
    const [res, json, followed, timestamps, badTimeout] = await Promise.all([
      admin(['job', 'submit', path, '--wait', '--timeout', '2']),
      admin(['job', 'submit', path, '--wait', '--timeout', '1', '--json']),
      admin(['job', 'submit', path, '--wait', '--timeout', '2', '--follow', '--timestamps']),
      admin(['job', 'submit', path, '--timestamps']),
      admin(['job', 'submit', path, '--wait', '--timeout', 'soon']),
    ]);
    expect(res.code).toBe(1);
    expect(Date.now() - started).toBeLessThan(15_000);
    expect(res.stderr).toMatch(
      /run r-[0-9a-f]{12} was not finished after 2s \(--timeout\); its jobs keep running/,
    );
    const row = /^(j-[0-9a-f]{12})\s+slow\s+(queued|dispatched|running)\b/m.exec(res.stdout);
    expect(row, res.stdout).not.toBeNull();
    const id = row![1]!;
    expect((await t.api<{ state: string }>('GET', `/api/v1/jobs/${id}`)).body.state).not.toMatch(
      /succeeded|failed|cancelled|timed-out|no-backend/,
    );

    expect(json.code).toBe(1);
    const body = JSON.parse(json.stdout) as { timedOut: boolean; jobs: { id: string; state: string }[] };
    expect(body.timedOut).toBe(true);
    expect(body.jobs[0]!.state).toMatch(/queued|dispatched|running/);
    expect(followed.code).toBe(1);
    expect(followed.stdout).toMatch(/^slow \| \d{4}-\d\d-\d\dT[\d:.]+Z » /m);
    const third = /^(j-[0-9a-f]{12})\s+slow\s/m.exec(followed.stdout)![1]!;
    for (const j of [id, body.jobs[0]!.id, third]) await t.api('POST', `/api/v1/jobs/${j}/cancel`);
    expect(timestamps.stderr).toMatch(/--timestamps only applies with --follow/);
    expect(badTimeout.stderr).toMatch(/--timeout: a number of seconds/);
  });
});

describe('job get', () => {
  it('shows the reason and one row per step (name, exit code, duration) in table mode', async () => {
    const res = await admin(['job', 'get', failedJob]);
    expect(res.code).toBe(0);
    expect(res.stdout).toMatch(/^state\s+failed$/m);
    expect(res.stdout).toMatch(/^reason\s+step "check" exited with 2$/m);
    // The dispatch-order facts: a run without them has priority 0 and no owner.
    expect(res.stdout).toMatch(/^priority\s+0$/m);
    expect(res.stdout).toMatch(/^owner\s+-$/m);
    expect(res.stdout).toMatch(/^STEP\s+NAME\s+EXIT\s+DURATION\s+RESULT$/m);
    expect(res.stdout).toMatch(/^1\s+prep\s+0\s+\d+(ms|\.\ds)\s+ok$/m);
    expect(res.stdout).toMatch(/^2\s+compile\s+0\s+\S+\s+ok$/m);
    expect(res.stdout).toMatch(/^3\s+check\s+2\s+\S+\s+failed$/m);
  });

  it('--json carries the same reason and steps with durations', async () => {
    const res = await admin(['job', 'get', failedJob, '--json']);
    const j = JSON.parse(res.stdout) as {
      reason: string;
      attempt: number;
      steps: { name: string; exitCode: number; durationMs: number }[];
    };
    expect(j.reason).toBe('step "check" exited with 2');
    expect(j.attempt).toBe(1);
    expect(j.steps.map((s) => [s.name, s.exitCode])).toEqual([
      ['prep', 0],
      ['compile', 0],
      ['check', 2],
    ]);
    for (const s of j.steps) expect(s.durationMs).toBeGreaterThanOrEqual(0);
  });
});

describe('job logs', () => {
  it('frames each step with its name, exit code and duration', async () => {
    const res = await admin(['job', 'logs', failedJob]);
    expect(res.code).toBe(0);
    // System lines (provisioning events, the agent's own output) arrive asynchronously and may land
    // between step lines; the framing is checked on the job's own lines.
    const all = res.stdout.trimEnd().split('\n');
    expect(all.some((l) => l.startsWith('» '))).toBe(true);
    const lines = all.filter((l) => !l.startsWith('» '));
    const first = lines.findIndex((l) => l.startsWith('──'));
    expect(lines[first]).toBe('── step 1/3 "prep" ──');
    expect(lines[first + 1]).toBe('preparing');
    expect(lines).toContain('warn');
    const frames = lines.filter((l) => l.startsWith('──'));
    expect(frames).toHaveLength(6);
    expect(frames.at(-1)).toMatch(/^── step "check" exited 2 in \S+ ──$/);
    expect(lines[lines.indexOf('checking') + 1]).toBe(frames.at(-1));
    const compile = lines.indexOf('── step 2/3 "compile" ──');
    expect(lines[compile - 1]).toMatch(/^── step "prep" exited 0 in \S+ ──$/);
  });

  it('--timestamps prefixes every line with its ISO time', async () => {
    const res = await admin(['job', 'logs', failedJob, '--timestamps']);
    const lines = res.stdout.trimEnd().split('\n');
    expect(lines.length).toBeGreaterThanOrEqual(9);
    for (const l of lines) expect(l).toMatch(ISO);
    expect(lines).toContainEqual(expect.stringMatching(/Z preparing$/));
  });

  it('--json keeps the raw lines plus the steps', async () => {
    const res = await admin(['job', 'logs', failedJob, '--json']);
    const body = JSON.parse(res.stdout) as {
      state: string;
      lines: { line: string; step: number; ts: string }[];
      steps: { name: string; exitCode: number }[];
    };
    expect(body.state).toBe('failed');
    expect(body.lines.map((l) => l.line)).toEqual(
      expect.arrayContaining(['preparing', 'compiling', 'warn', 'checking']),
    );
    expect(body.lines.find((l) => l.line === 'checking')!.step).toBe(2);
    expect(body.steps.map((s) => s.exitCode)).toEqual([0, 0, 2]);
  });
});

describe('job retry', () => {
  it('re-queues a finished job as the next attempt in the same run; prints the new id', async () => {
    const old = (await t.api<{ runId: string; name: string }>('GET', `/api/v1/jobs/${failedJob}`)).body;
    const res = await admin(['job', 'retry', failedJob]);
    expect(res.code, res.stderr).toBe(0);
    const newId = res.stdout.trim();
    expect(newId).toMatch(/^j-[0-9a-f]{12}$/);
    expect(newId).not.toBe(failedJob);
    const again = await t.waitForJob(newId);
    expect(again.state).toBe('failed');
    const got = JSON.parse((await admin(['job', 'get', newId, '--json'])).stdout) as Record<string, unknown>;
    expect(got).toMatchObject({ runId: old.runId, name: 'build', attempt: 2, retryOf: failedJob });
    expect((await admin(['job', 'get', newId])).stdout).toMatch(/^attempt\s+2 \(retry of j-/m);

    const json = await admin(['job', 'retry', newId, '--json']);
    const third = JSON.parse(json.stdout) as { id: string; attempt: number; state: string; runId: string };
    expect(third).toMatchObject({ attempt: 3, state: 'queued', runId: old.runId, retryOf: newId });

    // The unknown-id checks need no agent, so they run while the third attempt finishes.
    const [, missing, missingApi] = await Promise.all([
      t.waitForJob(third.id),
      admin(['job', 'retry', 'j-000000000000']),
      t.api('POST', '/api/v1/jobs/j-000000000000/retry'),
    ]);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/job j-000000000000 does not exist/);
    expect(missingApi.status).toBe(404);
  });

  it('refuses a job that is still running (409) with its state named', async () => {
    const path = await runFile('running.yaml', {
      long: { runsOn: ['linux', 'small'], steps: [{ run: 'sleep 60' }] },
    });
    const sub = JSON.parse((await admin(['job', 'submit', path, '--json'])).stdout) as {
      jobs: { id: string }[];
    };
    const id = sub.jobs[0]!.id;
    await t.waitForJob(id, ['running']);
    const res = await admin(['job', 'retry', id]);
    expect(res.code).toBe(1);
    expect(res.stderr).toMatch(new RegExp(`job ${id} is still running; only a finished job can be retried`));
    await t.api('POST', `/api/v1/jobs/${id}/cancel`);
    await t.waitForJob(id);
    const retried = await admin(['job', 'retry', id, '--json']);
    expect(retried.code).toBe(0);
    const r = JSON.parse(retried.stdout) as { id: string };
    // While that attempt is open, neither it nor the older attempt can be retried.
    const open = await t.api<{ problems: string[] }>('POST', `/api/v1/jobs/${r.id}/retry`);
    expect(open.status).toBe(409);
    const older = await admin(['job', 'retry', id]);
    expect(older.code).toBe(1);
    expect(older.stderr).toContain(`job ${id} has an attempt that is still`);
    expect(older.stderr).toContain(`(${r.id})`);
    await t.api('POST', `/api/v1/jobs/${r.id}/cancel`);
  });
});
