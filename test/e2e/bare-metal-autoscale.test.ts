import { afterEach, describe, expect, it } from 'vitest';
import {
  alive,
  bareMetalConfig,
  eventually,
  scalerIdle,
  startTestOrchestrator,
  type JobBody,
  type TestOrchestrator,
} from '../helpers/orchestrator.js';

let t: TestOrchestrator | undefined;
afterEach(async () => {
  await t?.stop();
  t = undefined;
});

interface Submitted {
  runId: string;
  jobs: { id: string; name: string }[];
}

describe('autoscaled bare-metal agents, end to end (real server, PGlite, agent processes)', () => {
  it('runs a burst of jobs over two label sets on fresh single-use agents, then tears them down', async () => {
    t = await startTestOrchestrator({ config: bareMetalConfig({ maxAgents: 3 }) });
    const jobs: Record<string, unknown> = {};
    for (let i = 0; i < 8; i++) {
      jobs[`j${i}`] = {
        runsOn: ['linux', i % 2 ? 'large' : 'small'],
        steps: [{ run: `echo out-$KICI_JOB_NAME; echo err-${i} >&2` }],
      };
    }
    const { status, body } = await t.api<Submitted>('POST', '/api/v1/runs', { name: 'burst', jobs });
    expect(status).toBe(201);
    expect(body.jobs).toHaveLength(8);
    const spawnedPids = new Set<number>();
    const agentIds = new Set<string>();
    let maxAlive = 0;
    const results: JobBody[] = [];
    for (const j of body.jobs) {
      // Watch the manager while jobs run: the cap must hold at every observation.
      const done = t.waitForJob(j.id);
      while (
        !(await Promise.race([done.then(() => true), new Promise((r) => setTimeout(() => r(false), 20))]))
      ) {
        const entries = t.orch.scaler!.entries();
        maxAlive = Math.max(maxAlive, entries.length);
        for (const e of entries) if (e.backendRef) spawnedPids.add(Number(e.backendRef));
      }
      results.push(await done);
    }
    for (const r of results) {
      expect(r.state, `${r.id}: ${r.reason}`).toBe('succeeded');
      expect(r.exitCode).toBe(0);
      expect(r.agentId).toMatch(/^scaler-bare-metal-[0-9a-f]{8}$/);
      agentIds.add(r.agentId!);
    }
    // Single use: every job ran on its own agent.
    expect(agentIds.size).toBe(8);
    expect(maxAlive).toBeLessThanOrEqual(3);
    // Output of both streams reached the log.
    const logs = await t.api<{ lines: { stream: string; line: string }[] }>(
      'GET',
      `/api/v1/jobs/${body.jobs[0]!.id}/logs`,
    );
    expect(logs.body.lines.map((l) => l.line)).toContain('out-j0');
    expect(logs.body.lines.some((l) => l.stream === 'stderr' && l.line === 'err-0')).toBe(true);
    // Compute is gone once each job is done: records are deleted only after destroy() returned.
    await eventually(() => scalerIdle(t!.orch.scaler!), 10_000, 'all agents torn down');
    await eventually(
      async () =>
        (await t!.orch.store.db.selectFrom('scaler_spawning_agents').selectAll().execute()).length === 0,
      10_000,
      'spawn records deleted',
    );
    expect(await t.orch.store.db.selectFrom('scaler_reservations').selectAll().execute()).toHaveLength(0);
    // A process that just exited is reaped by its parent a moment later.
    await eventually(() => [...spawnedPids].every((pid) => !alive(pid)), 2_000, 'agent processes gone');
    expect(t.orch.scaler!.capBook().count()).toBe(0);
  });

  it('a failing step ends the job failed with its exit code and log; later steps do not run', async () => {
    t = await startTestOrchestrator({ config: bareMetalConfig() });
    const { body } = await t.api<Submitted>('POST', '/api/v1/runs', {
      jobs: {
        broken: {
          runsOn: ['linux', 'small'],
          steps: [
            { name: 'ok', run: 'echo first' },
            { name: 'boom', run: 'echo about to fail; exit 7' },
            { name: 'never', run: 'echo should-not-run' },
          ],
        },
      },
    });
    const job = await t.waitForJob(body.jobs[0]!.id);
    expect(job.state).toBe('failed');
    expect(job.exitCode).toBe(7);
    const logs = await t.api<{ lines: { line: string }[] }>('GET', `/api/v1/jobs/${job.id}/logs`);
    const text = logs.body.lines.map((l) => l.line);
    expect(text).toContain('about to fail');
    expect(text).not.toContain('should-not-run');
    const detail = await t.api<{ steps: { idx: number; exitCode: number | null }[] }>(
      'GET',
      `/api/v1/jobs/${job.id}`,
    );
    expect(detail.body.steps.map((s) => s.exitCode)).toEqual([0, 7]);
  });

  it('a job no label set matches ends no-backend with the reason', async () => {
    t = await startTestOrchestrator({ config: bareMetalConfig() });
    const { body } = await t.api<Submitted>('POST', '/api/v1/runs', {
      jobs: { gpu: { runsOn: ['linux', 'gpu'], steps: [{ run: 'true' }] } },
    });
    const job = await t.waitForJob(body.jobs[0]!.id);
    expect(job.state).toBe('no-backend');
    expect(job.reason).toMatch(/no scaler label set matches \[linux,gpu\]/);
    expect(job.reason).toMatch(/bm\[linux,small\]/);
    expect(t.orch.scaler!.entries()).toHaveLength(0);
  });

  it('step and job timeouts end the job timed-out and stop its processes', async () => {
    t = await startTestOrchestrator({ config: bareMetalConfig() });
    const { body } = await t.api<Submitted>('POST', '/api/v1/runs', {
      jobs: {
        stepTimeout: { runsOn: ['linux', 'small'], steps: [{ run: 'sleep 30', timeoutSeconds: 1 }] },
        jobTimeout: {
          runsOn: ['linux', 'large'],
          timeoutSeconds: 1,
          steps: [{ run: 'echo start' }, { run: 'sleep 30' }],
        },
      },
    });
    const started = Date.now();
    const [a, b] = await Promise.all(body.jobs.map((j) => t!.waitForJob(j.id)));
    expect(a!.state).toBe('timed-out');
    expect(b!.state).toBe('timed-out');
    expect(Date.now() - started).toBeLessThan(15_000);
  });

  it('cancelling a running job stops it and frees the agent', async () => {
    t = await startTestOrchestrator({ config: bareMetalConfig() });
    const { body } = await t.api<Submitted>('POST', '/api/v1/runs', {
      jobs: { long: { runsOn: ['linux', 'small'], steps: [{ run: 'echo running; sleep 60' }] } },
    });
    const id = body.jobs[0]!.id;
    await t.waitForJob(id, ['running']);
    const res = await t.api<{ state: string }>('POST', `/api/v1/jobs/${id}/cancel`);
    expect(res.status).toBe(200);
    expect((await t.waitForJob(id)).state).toBe('cancelled');
    await eventually(() => scalerIdle(t!.orch.scaler!), 15_000, 'agent torn down after cancel');
    const again = await t.api('POST', `/api/v1/jobs/${id}/cancel`);
    expect(again.status).toBe(409);
  });
});
