import { afterEach, describe, expect, it } from 'vitest';
import {
  bareMetalConfig,
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

type Shown = JobBody & { dispatchedAt: string | null; priority: number; owner: string | null };

function jobs(n: number, prefix: string, extra: Record<string, unknown> = {}) {
  const out: Record<string, unknown> = {};
  for (let i = 0; i < n; i++)
    out[`${prefix}${i}`] = { runsOn: ['linux', 'small'], steps: [{ run: 'true' }], ...extra };
  return out;
}

async function submit(run: Record<string, unknown>): Promise<Submitted> {
  const { status, body } = await t!.api<Submitted>('POST', '/api/v1/runs', run);
  expect(status).toBe(201);
  return body;
}

/** Every job of the runs as the API shows it, in the order they were handed to agents. */
async function dispatchOrder(ids: string[]): Promise<Shown[]> {
  const shown = await Promise.all(
    ids.map(async (id) => (await t!.api<Shown>('GET', `/api/v1/jobs/${id}`)).body),
  );
  return shown
    .filter((j) => j.dispatchedAt)
    .sort((a, b) => new Date(a.dispatchedAt!).getTime() - new Date(b.dispatchedAt!).getTime());
}

async function cancelAll(ids: string[]): Promise<void> {
  for (const id of ids) await t!.api('POST', `/api/v1/jobs/${id}/cancel`);
}

describe('priorities and fair share, end to end (real server, PGlite, bare-metal agents)', () => {
  it('refuses a bad priority or owner with 400 naming the field', async () => {
    t = await startTestOrchestrator({ config: bareMetalConfig({ maxAgents: 1 }) });
    const bad = await t.api<{ problems: string[] }>('POST', '/api/v1/runs', {
      priority: 1.5,
      owner: 'team a',
      jobs: { a: { runsOn: ['linux', 'small'], steps: [{ run: 'true' }], priority: 100_000 } },
    });
    expect(bad.status).toBe(400);
    const text = bad.body.problems.join('\n');
    expect(text).toMatch(/^priority: /m);
    expect(text).toMatch(/^owner: /m);
    expect(text).toMatch(/^jobs\.a\.priority: /m);
  });

  it('with maxAgents 1 and ten low-priority jobs queued, a high-priority job submitted later runs next', async () => {
    t = await startTestOrchestrator({ config: bareMetalConfig({ maxAgents: 1 }) });
    const low = await submit({ name: 'low', owner: 'a', jobs: jobs(10, 'low') });
    const high = await submit({ name: 'high', priority: 10, jobs: jobs(1, 'high') });
    const highId = high.jobs[0]!.id;
    const done = await t.waitForJob(highId);
    expect(done.state, done.reason ?? '').toBe('succeeded');
    const lowIds = low.jobs.map((j) => j.id);
    const order = await dispatchOrder([...lowIds, highId]);
    // At most the one low job whose agent was already on its way when the high one came.
    expect(order.findIndex((j) => j.id === highId)).toBeLessThanOrEqual(1);
    const shown = (await t.api<Shown>('GET', `/api/v1/jobs/${highId}`)).body;
    expect(shown.priority).toBe(10);
    expect(shown.owner).toBeNull();
    const explained = await t.api<{ lines: string[]; priority: number; owner: string }>(
      'GET',
      `/api/v1/scaler/explain/${lowIds[9]}`,
    );
    expect(explained.body.priority).toBe(0);
    expect(explained.body.owner).toBe('a');
    await cancelAll(lowIds);
  });

  it('owner A submits 50 jobs, then owner B 5: B starts within the first 10 dispatches after its submit', async () => {
    t = await startTestOrchestrator({ config: bareMetalConfig({ maxAgents: 1 }) });
    const a = await submit({ name: 'burst', owner: 'team-a', jobs: jobs(50, 'a') });
    const b = await submit({ name: 'small', owner: 'team-b', jobs: jobs(5, 'b') });
    const bSubmitted = Date.now();
    const bIds = b.jobs.map((j) => j.id);
    for (const id of bIds) {
      const r = await t.waitForJob(id);
      expect(r.state, r.reason ?? '').toBe('succeeded');
    }
    const aIds = a.jobs.map((j) => j.id);
    await cancelAll(aIds);
    const order = await dispatchOrder([...aIds, ...bIds]);
    const after = order.filter((j) => new Date(j.dispatchedAt!).getTime() >= bSubmitted - 5);
    const lastB = Math.max(...bIds.map((id) => after.findIndex((j) => j.id === id)));
    expect(after.slice(0, 10).filter((j) => j.owner === 'team-b')).toHaveLength(5);
    expect(lastB).toBeLessThan(10);
  });
});
