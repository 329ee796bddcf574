import { access } from 'node:fs/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { detectCgroups } from '../../src/scaler/backends/bare-metal/cgroups.js';
import { outputLines, running, submit, waitForLine, useTaggedJobs } from '../helpers/jobs.js';
import {
  AGENT_BIN,
  bareMetalConfig,
  eventually,
  scalerIdle,
  startTestOrchestrator,
  type TestOrchestrator,
} from '../helpers/orchestrator.js';

/**
 * The step-runner rules of docs/step-runner.md with `enforceCgroups: true` (root): background
 * processes do not hold a step open, live on into the next step, die with the job, and a cancel
 * frees the agent. Here the cgroup also catches a daemon that scrubbed every marker from its env.
 */

let t: TestOrchestrator | undefined;
const tagged = useTaggedJobs();
afterEach(async () => {
  await t?.stop();
  t = undefined;
});

const exists = (p: string) =>
  access(p).then(
    () => true,
    () => false,
  );

async function start(maxAgents: number) {
  const driver = await detectCgroups();
  expect(driver, 'a usable cgroup hierarchy under /sys/fs/cgroup').toBeDefined();
  t = await startTestOrchestrator({
    config: bareMetalConfig({ enforceCgroups: true, maxAgents }, [
      { labels: ['linux'], binaryPath: AGENT_BIN },
    ]),
  });
  const memDir = driver!.version === 2 ? '/sys/fs/cgroup/kici' : '/sys/fs/cgroup/memory/kici';
  return { t, cgroupOf: (agentId: string) => `${memDir}/${agentId}` };
}

describe('step runner with cgroups (root): background processes', () => {
  it('&, setsid, double fork, nohup: prompt steps, no survivor; a scrubbed daemon dies with the cgroup', async () => {
    const { t, cgroupOf } = await start(4);
    const variants = {
      plain: 'sleep 20 &',
      setsid: 'setsid sleep 1000 &',
      doublefork: "(sh -c 'sleep 1000 &' &)",
      nohup: 'nohup sleep 1000 &',
      scrubbed: 'env -u KICI_JOB_MARKER -u KICI_AGENT_ID setsid sleep 1000 > /dev/null 2>&1 &',
    };
    const made = Object.entries(variants).map(([name, run]) => {
      const { tag, job } = tagged.job([
        { name: 'start', run: `${run}\necho "in $(cat /proc/self/cgroup | grep -c "kici/$KICI_AGENT_ID")"` },
        { name: 'after', run: 'echo next step ran' },
      ]);
      return { name, tag, job };
    });
    const started = Date.now();
    const ids = await submit(t, Object.fromEntries(made.map((m) => [m.name, m.job])));
    const results = await Promise.all(ids.map((id) => t.waitForJob(id, undefined, 90_000)));
    expect(Date.now() - started).toBeLessThan(60_000);
    for (const [i, { name, tag }] of made.entries()) {
      expect(results[i]!.state, name).toBe('succeeded');
      const lines = await outputLines(t, ids[i]!);
      expect(
        Number(lines.find((l) => l.startsWith('in '))?.slice(3)),
        `${name} ran in the cgroup`,
      ).toBeGreaterThan(0);
      expect(lines).toContain('next step ran');
      // The marker-scrubbed daemon escapes the job's clean-up but not the removal of the agent's cgroup.
      if (name === 'scrubbed')
        await eventually(async () => (await tagged.alive(tag)) === 0, 20_000, 'scrubbed daemon gone');
      else expect(await tagged.alive(tag), name).toBe(0);
    }
    await eventually(() => scalerIdle(t.orch.scaler!), 20_000, 'agents torn down');
    for (const r of results) {
      await eventually(async () => !(await exists(cgroupOf(r!.agentId!))), 15_000, 'cgroup removed');
    }
  });

  it('a background process lives on into the next step and dies with the job', async () => {
    const { t } = await start(1);
    const { tag, job } = tagged.job([
      { name: 'serve', run: 'sleep 30 & echo $! > server.pid' },
      { name: 'test', run: 'kill -0 "$(cat server.pid)" && echo "alive $(cat server.pid)"' },
    ]);
    const [id] = await submit(t, { across: job });
    expect((await t.waitForJob(id!, undefined, 25_000)).state).toBe('succeeded');
    const pid = Number((await outputLines(t, id!)).find((l) => l.startsWith('alive '))?.split(' ')[1]);
    expect(pid).toBeGreaterThan(0);
    expect(await running(pid)).toBe(false);
    expect(await tagged.alive(tag)).toBe(0);
  });

  it('cancel and step timeout with setsid children: the agent leaves and the only slot frees', async () => {
    const { t } = await start(1);
    const cancelled = tagged.job([{ name: 'hold', run: 'setsid sleep 1000 & echo up; sleep 1000' }]);
    const [c] = await submit(t, { hold: cancelled.job });
    await waitForLine(t, c!, /^up$/);
    expect((await t.api('POST', `/api/v1/jobs/${c}/cancel`)).status).toBe(200);
    expect((await t.waitForJob(c!)).state).toBe('cancelled');
    // The server settles a cancel at once; the agent's clean-up follows within its grace.
    await eventually(
      async () => (await tagged.alive(cancelled.tag)) === 0,
      15_000,
      'cancelled job cleaned up',
    );

    const timed = tagged.job([{ name: 'build', run: 'setsid sleep 1000 & sleep 1000', timeoutSeconds: 2 }]);
    const [s] = await submit(t, { timed: timed.job });
    const job = await t.waitForJob(s!, undefined, 60_000);
    expect(job.state).toBe('timed-out');
    expect(job.reason).toBe('step "build" timed out after 2s');
    expect(await tagged.alive(timed.tag)).toBe(0);

    const [next] = await submit(t, { next: { runsOn: ['linux'], steps: [{ run: 'echo next' }] } });
    expect((await t.waitForJob(next!, undefined, 60_000)).state).toBe('succeeded');
  });
});
