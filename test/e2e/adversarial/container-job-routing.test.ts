import { afterEach, describe, expect, it } from 'vitest';
import type { SpawnRequest } from '../../../src/scaler/types.js';
import { bystanderJob, expectHealthy } from '../../helpers/adversarial.js';
import {
  bareMetalConfig,
  eventually,
  startTestOrchestrator,
  type TestOrchestrator,
} from '../../helpers/orchestrator.js';

/**
 * A job with `container:` that reaches a bare-metal scaler in process mode (binaryPath) must not
 * make it spawn agents that cannot take the job. It ends `no-backend` with a reason naming what is
 * missing (or waits, when some other agent could take it), and the other jobs of the scaler are not
 * held up.
 */

const REASON =
  'job asks for container image "alpine:3"; label set [linux,small] of scaler "bm" runs agents as host ' +
  'processes (binaryPath) and cannot run job images; add a label set with a container runtime';

let t: TestOrchestrator | undefined;
afterEach(async () => {
  await t?.stop();
  t = undefined;
});

/** Every spawn the real backend is asked for, with the job it is bound to. */
function recordSpawns(t: TestOrchestrator): (string | undefined)[] {
  const bound: (string | undefined)[] = [];
  const backend = t.orch.scaler!.backendList()[0]!;
  const spawn = backend.spawn.bind(backend);
  backend.spawn = (req: SpawnRequest) => {
    bound.push(req.boundJobId);
    return spawn(req);
  };
  return bound;
}

interface Run {
  jobs: { id: string }[];
}

describe('a container job on a process-mode bare-metal scaler', () => {
  it('ends no-backend with the reason, spawns nothing for it, and the other jobs run', async () => {
    t = await startTestOrchestrator({ config: bareMetalConfig() });
    const bystander = await bystanderJob(t, ['linux', 'small']);
    const bound = recordSpawns(t);
    const jobs: Record<string, unknown> = {
      boxed: { runsOn: ['linux', 'small'], container: { image: 'alpine:3' }, steps: [{ run: 'true' }] },
    };
    for (let i = 0; i < 6; i++)
      jobs[`plain-${i}`] = { runsOn: ['linux', i % 2 ? 'large' : 'small'], steps: [{ run: 'sleep 0.2' }] };
    const started = Date.now();
    const run = await t.api<Run>('POST', '/api/v1/runs', { name: 'mixed', jobs });
    expect(run.status).toBe(201);
    const [boxed, ...plain] = run.body.jobs.map((j) => j.id);

    const final = await t.waitForJob(boxed!, undefined, 15_000);
    expect(final.state).toBe('no-backend');
    expect(final.reason).toContain(REASON);
    expect(Date.now() - started).toBeLessThan(10_000);
    for (const id of plain) expect((await t.waitForJob(id)).state).toBe('succeeded');
    // One single-use agent per plain job, none for the container job.
    expect(bound.filter((id) => id === boxed)).toEqual([]);
    expect(bound).toHaveLength(plain.length);

    const explain = await t.api<{ lines: string[] }>('GET', `/api/v1/scaler/explain/${boxed}`);
    expect(explain.body.lines.join('\n')).toContain(REASON);
    await expectHealthy(t);
    await bystander.check();
  });

  it('waits, not fails, while a static agent could take it, and explain gives the same reason', async () => {
    t = await startTestOrchestrator({ config: bareMetalConfig() });
    const bound = recordSpawns(t);
    const token = await t.api('POST', '/api/v1/agents/tokens', { labels: ['linux', 'small'] });
    expect(token.status).toBe(201);
    const run = await t.api<Run>('POST', '/api/v1/runs', {
      jobs: {
        boxed: { runsOn: ['linux', 'small'], container: { image: 'alpine:3' }, steps: [{ run: 'true' }] },
      },
    });
    const id = run.body.jobs[0]!.id;
    const waiting = await eventually(async () => {
      const job = (await t!.api<{ state: string; waiting: string | null }>('GET', `/api/v1/jobs/${id}`)).body;
      return job.waiting ? job : undefined;
    });
    expect(waiting.state).toBe('queued');
    await new Promise((r) => setTimeout(r, 1_000));
    expect(bound).toEqual([]);
    const explain = await t.api<{ lines: string[] }>('GET', `/api/v1/scaler/explain/${id}`);
    expect(explain.body.lines.join('\n')).toContain(REASON);
    expect((await t.api('POST', `/api/v1/jobs/${id}/cancel`)).status).toBe(200);
  });
});
