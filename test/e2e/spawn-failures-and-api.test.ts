import { chmod, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import {
  AGENT_BIN,
  bareMetalConfig,
  eventually,
  scalerIdle,
  startTestOrchestrator,
  type TestOrchestrator,
} from '../helpers/orchestrator.js';
import { tempDir } from '../helpers/temp-dirs.js';
import { vanishingBinary } from '../helpers/vanishing-binary.js';

let t: TestOrchestrator | undefined;
afterEach(async () => {
  await t?.stop();
  t = undefined;
});

describe('spawn failures are classified, visible and backed off', () => {
  it('a missing agent binary fails the spawn, shows the reason on the job, and backs off without a retry storm', async () => {
    const bin = await vanishingBinary(join(tmpdir(), `kici-no-such-agent-binary-${process.pid}`));
    const missing = bin.path;
    t = await startTestOrchestrator({
      config: bareMetalConfig({}, [{ labels: ['linux'], binaryPath: missing }]),
      sweepIntervalMs: 200,
    });
    await bin.vanish();
    const run = await t.api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
      jobs: {
        a: { runsOn: ['linux'], steps: [{ run: 'true' }] },
        b: { runsOn: ['linux'], steps: [{ run: 'true' }] },
      },
    });
    const id = run.body.jobs[0]!.id;
    const job = await eventually(
      async () => {
        const j = (
          await t!.api<{ state: string; waiting: string | null; lastProvisioningError: string | null }>(
            'GET',
            `/api/v1/jobs/${id}`,
          )
        ).body;
        return j.lastProvisioningError ? j : undefined;
      },
      10_000,
      'provisioning error on the job',
    );
    expect(job.state).toBe('queued');
    expect(job.lastProvisioningError).toBe(`binary-missing: agent binary ${missing} does not exist`);
    // Both queued jobs got one attempt each before the first failure armed the backoff. After that the
    // sweep runs every 200 ms, and the backoff must keep it from spawning again (no retry storm).
    await eventually(() => scalerIdle(t!.orch.scaler!), 5000, 'failed spawns cleaned up');
    const attempts = t.orch.scaler!.failures.size;
    expect(attempts).toBeGreaterThanOrEqual(1);
    expect(attempts).toBeLessThanOrEqual(2);
    await new Promise((r) => setTimeout(r, 1500));
    expect(t.orch.scaler!.failures.size).toBe(attempts);
    const status = await t.api<{
      scalers: {
        backoff: { consecutiveFailures: number; retryInMs: number; lastError: { kind: string } }[];
      }[];
    }>('GET', '/api/v1/scaler/status');
    const backoff = status.body.scalers[0]!.backoff[0]!;
    expect(backoff.consecutiveFailures).toBe(attempts);
    expect(backoff.lastError.kind).toBe('binary-missing');
    expect(backoff.retryInMs).toBeGreaterThan(25_000);
    const explain = await t.api<{ lines: string[] }>('GET', `/api/v1/scaler/explain/${run.body.jobs[1]!.id}`);
    expect(explain.body.lines.join('\n')).toMatch(/backoff: .*failed to start an agent/);
    expect(t.orch.scaler!.capBook().count()).toBe(0);
  });

  /** Start with a fake agent binary, submit one job, and return the error the failed spawn left on it. */
  async function provisioningErrorWith(script: string, mode: number): Promise<string> {
    const dir = await tempDir('kici-agent-bin-');
    const path = join(dir, 'agent');
    await writeFile(path, script);
    // Executable at start-up (a broken binary stops start-up); the mode under test applies after.
    await chmod(path, 0o755);
    t = await startTestOrchestrator({
      config: bareMetalConfig({}, [{ labels: ['linux'], binaryPath: path }]),
    });
    await chmod(path, mode);
    const run = await t.api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
      jobs: { a: { runsOn: ['linux'], steps: [{ run: 'true' }] } },
    });
    return eventually(async () => {
      const url = `/api/v1/jobs/${run.body.jobs[0]!.id}`;
      return (await t!.api<{ lastProvisioningError: string | null }>('GET', url)).body.lastProvisioningError;
    });
  }

  it('a binary that is not executable is classified as such', async () => {
    const error = await provisioningErrorWith('#!/bin/sh\necho hi\n', 0o644);
    expect(error).toMatch(/^not-executable: agent binary .* is not executable$/);
  });

  it('an agent that exits before registering is a failed start, with its output tail', async () => {
    const error = await provisioningErrorWith(
      '#!/bin/sh\necho "cannot reach the orchestrator" >&2\nexit 4\n',
      0o755,
    );
    expect(error).toMatch(/^exited-before-register: agent process exited with code 4 before it registered/);
    expect(error).toMatch(/cannot reach the orchestrator/);
  });

  it('maxAgents holds: extra jobs wait and run when capacity frees up', async () => {
    t = await startTestOrchestrator({
      config: bareMetalConfig({ maxAgents: 1 }, [{ labels: ['linux'], binaryPath: AGENT_BIN }]),
    });
    const jobs: Record<string, unknown> = {};
    for (let i = 0; i < 3; i++) jobs[`j${i}`] = { runsOn: ['linux'], steps: [{ run: 'sleep 0.3' }] };
    const run = await t.api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', { jobs });
    let peak = 0;
    const done = Promise.all(run.body.jobs.map((j) => t!.waitForJob(j.id)));
    let finished = false;
    void done.then(() => (finished = true));
    while (!finished) {
      peak = Math.max(peak, t.orch.scaler!.entries().length, t.orch.scaler!.capBook().count());
      await new Promise((r) => setTimeout(r, 10));
    }
    expect((await done).map((j) => j.state)).toEqual(['succeeded', 'succeeded', 'succeeded']);
    expect(peak).toBe(1);
  });
});

describe('HTTP API input handling', () => {
  it('refuses requests without the admin token', async () => {
    t = await startTestOrchestrator();
    const res = await fetch(`${t.orch.url}/api/v1/jobs`);
    expect(res.status).toBe(401);
    const wrong = await fetch(`${t.orch.url}/api/v1/jobs`, { headers: { authorization: 'Bearer nope' } });
    expect(wrong.status).toBe(401);
    expect((await fetch(`${t.orch.url}/healthz`)).status).toBe(200);
    expect((await fetch(`${t.orch.url}/readyz`)).status).toBe(200);
  });

  it('answers a bad run body with 400 naming each field', async () => {
    t = await startTestOrchestrator();
    const cases: [unknown, RegExp][] = [
      ['{not json', /\(body\): must be a JSON object/],
      [{}, /jobs: /],
      [{ jobs: { a: { runsOn: ['x'], steps: [] } } }, /jobs\.a\.steps: at least one step/],
      [
        { jobs: { a: { runsOn: ['x'], steps: [{ run: 'true', timeoutSeconds: -1 }] } } },
        /jobs\.a\.steps\[0\]\.timeoutSeconds/,
      ],
      [{ jobs: { a: { steps: [{ run: 'true' }] } } }, /jobs\.a\.runsOn/],
      [
        {
          jobs: { a: { runsOn: ['x'], steps: [{ run: 'true' }], resources: { limits: { memory: '2gb' } } } },
        },
        /jobs\.a\.resources\.limits\.memory/,
      ],
      [{ jobs: { a: { runsOn: ['x'], steps: [{ run: 'true' }], bogus: 1 } } }, /jobs\.a: .*bogus/],
    ];
    for (const [body, pattern] of cases) {
      const res = await t.api<{ problems: string[] }>('POST', '/api/v1/runs', body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(res.body.problems.join('\n')).toMatch(pattern);
    }
    const listBad = await t.api<{ problems: string[] }>('GET', '/api/v1/jobs?state=bogus');
    expect(listBad.status).toBe(400);
    expect(listBad.body.problems[0]).toMatch(/^state: one of/);
    expect((await t.api('GET', '/api/v1/jobs/j-nope')).status).toBe(404);
  });
});
