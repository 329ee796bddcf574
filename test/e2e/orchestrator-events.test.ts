/**
 * The events an in-process orchestrator tells its listeners, on a real bare-metal agent: the agent
 * registers, its job is stored as running and then as settled (in that order, each after the row
 * reads so), and a scaler reload reports its result.
 */
import { afterAll, describe, expect, it } from 'vitest';
import type { OrchestratorEvents } from '../../src/server/orchestrator.js';
import { bareMetalConfig, startTestOrchestrator, type TestOrchestrator } from '../helpers/orchestrator.js';

let t: TestOrchestrator | undefined;
afterAll(async () => {
  await t?.stop();
});

describe('orchestrator events', () => {
  it('agent registered, job started, job settled, reload applied', async () => {
    t = await startTestOrchestrator({ config: bareMetalConfig() });
    const heard: string[] = [];
    const rows: string[] = [];
    const names = ['agent.registered', 'job.started', 'job.settled', 'reload.applied'] as const;
    for (const name of names)
      t.orch.events.on(name, (e: OrchestratorEvents[typeof name]) =>
        heard.push(`${name} ${JSON.stringify(e)}`),
      );
    const run = await t.api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
      jobs: { j: { runsOn: ['linux', 'small'], steps: [{ run: 'true' }] } },
    });
    const jobId = run.body.jobs[0]!.id;
    const api = t.api;
    // Each event comes after the store says so: read the row the moment it is heard.
    const started = t.orch.events
      .next('job.started', (e) => e.jobId === jobId)
      .then(async () => {
        rows.push((await api<{ state: string }>('GET', `/api/v1/jobs/${jobId}`)).body.state);
      });
    const settled = await t.orch.events.next('job.settled', (e) => e.jobId === jobId);
    await started;
    expect(settled).toEqual({ jobId, state: 'succeeded' });
    expect(['running', 'succeeded']).toContain(rows[0]);
    expect((await t.waitForJob(jobId)).state).toBe('succeeded');
    const order = heard.map((h) => h.split(' ')[0]);
    expect(order.indexOf('agent.registered')).toBeGreaterThanOrEqual(0);
    expect(order.indexOf('agent.registered')).toBeLessThan(order.indexOf('job.started'));
    expect(order.indexOf('job.started')).toBeLessThan(order.indexOf('job.settled'));
    expect(heard.find((h) => h.startsWith('job.started'))).toContain(jobId);

    const reloaded = t.orch.events.next('reload.applied');
    const res = await t.api<{ result: string }>('POST', '/api/v1/scaler/reload');
    expect(await reloaded).toMatchObject({ result: res.body.result });
  });
});
