import { expect } from 'vitest';
import type { TestOrchestrator } from './orchestrator.js';

/**
 * Shared checks for the adversarial suite: after each attack the server must still answer, and a
 * job that had nothing to do with the attack must look exactly as it did before.
 */

export async function expectHealthy(t: TestOrchestrator): Promise<void> {
  const res = await fetch(`${t.orch.url}/healthz`);
  expect(res.status).toBe(200);
}

interface JobSnapshot {
  state: string;
  exitCode: number | null;
  reason: string | null;
  lines: string[];
}

async function snapshot(t: TestOrchestrator, jobId: string): Promise<JobSnapshot> {
  const job = await t.api<{ state: string; exitCode: number | null; reason: string | null }>(
    'GET',
    `/api/v1/jobs/${jobId}`,
  );
  const logs = await t.api<{ lines: { stream: string; line: string }[] }>(
    'GET',
    `/api/v1/jobs/${jobId}/logs`,
  );
  return {
    state: job.body.state,
    exitCode: job.body.exitCode,
    reason: job.body.reason,
    lines: logs.body.lines.filter((l) => l.stream !== 'system').map((l) => l.line),
  };
}

/**
 * A finished job that no attack should touch. `runsOn` must be served by the test's config (or a
 * static agent the test runs). Call `check()` after the attack.
 */
export async function bystanderJob(
  t: TestOrchestrator,
  runsOn: string[],
): Promise<{ jobId: string; check(): Promise<void> }> {
  const run = await t.api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
    name: 'bystander',
    jobs: {
      bystander: {
        runsOn,
        steps: [{ name: 'say', run: 'for i in 1 2 3 4 5; do echo "bystander line $i"; done' }],
      },
    },
  });
  expect(run.status).toBe(201);
  const jobId = run.body.jobs[0]!.id;
  await t.waitForJob(jobId);
  const before = await snapshot(t, jobId);
  expect(before.state).toBe('succeeded');
  expect(before.lines).toEqual([1, 2, 3, 4, 5].map((i) => `bystander line ${i}`));
  return {
    jobId,
    async check() {
      expect(await snapshot(t, jobId)).toEqual(before);
    },
  };
}
