import { afterEach, describe, expect, it } from 'vitest';
import { expectHealthy } from '../../helpers/adversarial.js';
import { outputLines, running, submit, waitForLine, useTaggedJobs } from '../../helpers/jobs.js';
import {
  AGENT_BIN,
  bareMetalConfig,
  eventually,
  scalerIdle,
  startTestOrchestrator,
  type TestOrchestrator,
} from '../../helpers/orchestrator.js';
import { pidsWithEnv } from '../../helpers/processes.js';

/**
 * Background processes must not hold a step open, must not outlive their job, and a cancel or
 * timeout must always free the agent. docs/step-runner.md states the rules. Every job here carries
 * a TEST_TAG of its own in its env, so the test finds what it started without relying on the
 * agent's own marker.
 */

let t: TestOrchestrator | undefined;
const tagged = useTaggedJobs();
afterEach(async () => {
  await t?.stop();
  t = undefined;
});

const oneSlot = () => bareMetalConfig({ maxAgents: 1 }, [{ labels: ['linux'], binaryPath: AGENT_BIN }]);

describe('step runner: background processes', () => {
  it('a plain `sleep 20 &` does not keep its step open', async () => {
    t = await startTestOrchestrator({ config: oneSlot() });
    const { tag, job } = tagged.job([{ name: 'bg', run: 'sleep 20 & echo started' }]);
    const started = Date.now();
    const [id] = await submit(t, { bg: job });
    const done = await t.waitForJob(id!, undefined, 40_000);
    expect(done.state).toBe('succeeded');
    expect(Date.now() - started).toBeLessThan(10_000);
    expect(await outputLines(t, id!)).toEqual(['started']);
    expect(await tagged.alive(tag)).toBe(0);
  });

  it('setsid, double fork and nohup children: the job succeeds promptly and none outlives it', async () => {
    t = await startTestOrchestrator({ config: bareMetalConfig({ maxAgents: 3 }) });
    const variants = {
      setsid: 'setsid sleep 1000 &',
      doublefork: "(sh -c 'sleep 1000 &' &)",
      nohup: 'nohup sleep 1000 &',
    };
    const made = Object.entries(variants).map(([name, run]) => {
      const { tag, job } = tagged.job([
        { name: 'start', run: `${run}\necho "marker=$KICI_JOB_MARKER"` },
        { name: 'after', run: 'echo next step ran' },
      ]);
      return { name, tag, job: { ...job, runsOn: ['linux', 'small'] } };
    });
    const started = Date.now();
    const ids = await submit(t, Object.fromEntries(made.map((m) => [m.name, m.job])));
    const results = await Promise.all(ids.map((id) => t!.waitForJob(id, undefined, 60_000)));
    expect(Date.now() - started).toBeLessThan(30_000);
    for (const [i, { name, tag }] of made.entries()) {
      expect(results[i]!.state, name).toBe('succeeded');
      const lines = await outputLines(t, ids[i]!);
      const marker = lines.find((l) => l.startsWith('marker='))!.slice('marker='.length);
      expect(marker, `${name}: each step carries the job marker`).toMatch(/^[0-9a-f]{24}$/);
      expect(lines).toContain('next step ran');
      expect(await pidsWithEnv(`KICI_JOB_MARKER=${marker}`), name).toEqual([]);
      expect(await tagged.alive(tag), name).toBe(0);
    }
    await expectHealthy(t);
  });

  it('a background process lives on into the next step and dies with the job', async () => {
    t = await startTestOrchestrator({ config: oneSlot() });
    const { tag, job } = tagged.job([
      { name: 'serve', run: 'sleep 30 & echo $! > server.pid' },
      { name: 'test', run: 'kill -0 "$(cat server.pid)" && echo "alive $(cat server.pid)"' },
    ]);
    const [id] = await submit(t, { across: job });
    const done = await t.waitForJob(id!, undefined, 25_000);
    expect(done.state).toBe('succeeded');
    const line = (await outputLines(t, id!)).find((l) => l.startsWith('alive '));
    const pid = Number(line?.split(' ')[1]);
    expect(pid).toBeGreaterThan(0);
    expect(await running(pid)).toBe(false);
    expect(await tagged.alive(tag)).toBe(0);
  });

  it('a cancelled job with a setsid child ends, its agent leaves and the only slot frees', async () => {
    t = await startTestOrchestrator({ config: oneSlot() });
    const { tag, job } = tagged.job([{ name: 'hold', run: 'setsid sleep 1000 & echo up; sleep 1000' }]);
    const [id] = await submit(t, { hold: job });
    await waitForLine(t, id!, /^up$/);
    const agentId = (await t.waitForJob(id!, ['running'])).agentId!;
    expect((await t.api('POST', `/api/v1/jobs/${id}/cancel`)).status).toBe(200);
    expect((await t.waitForJob(id!)).state).toBe('cancelled');
    await eventually(
      async () => (await pidsWithEnv(`KICI_AGENT_ID=${agentId}`)).length === 0,
      20_000,
      'agent gone',
    );
    expect(await tagged.alive(tag)).toBe(0);
    const [next] = await submit(t, { next: { runsOn: ['linux'], steps: [{ run: 'echo next' }] } });
    expect((await t.waitForJob(next!, undefined, 30_000)).state).toBe('succeeded');
  });

  it('step and job timeouts with setsid children: the reason names the step, the agent leaves, the slot frees', async () => {
    t = await startTestOrchestrator({ config: oneSlot() });
    const step = tagged.job([{ name: 'build', run: 'setsid sleep 1000 & sleep 1000', timeoutSeconds: 1 }]);
    const [stepJob] = await submit(t, { stepTimeout: step.job });
    const s = await t.waitForJob(stepJob!, undefined, 30_000);
    expect(s.state).toBe('timed-out');
    expect(s.reason).toBe('step "build" timed out after 1s');
    expect(await tagged.alive(step.tag)).toBe(0);

    const whole = tagged.job([{ name: 'hold', run: 'setsid sleep 1000 & sleep 1000' }], {
      timeoutSeconds: 1,
    });
    const [jobJob] = await submit(t, { jobTimeout: whole.job });
    const j = await t.waitForJob(jobJob!, undefined, 30_000);
    expect(j.state).toBe('timed-out');
    expect(j.reason).toBe('job timed out after 1s');
    expect(await tagged.alive(whole.tag)).toBe(0);

    const [next] = await submit(t, { next: { runsOn: ['linux'], steps: [{ run: 'echo next' }] } });
    expect((await t.waitForJob(next!, undefined, 30_000)).state).toBe('succeeded');
    await eventually(() => scalerIdle(t!.orch.scaler!), 15_000, 'agents torn down');
  });
});
