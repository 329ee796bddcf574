import { afterEach, describe, expect, it } from 'vitest';
import { submit, waitForLine, useTaggedJobs } from '../../helpers/jobs.js';
import { daemonScript, killAll, liveWithMarker } from '../../helpers/marked-daemons.js';
import {
  AGENT_BIN,
  bareMetalConfig,
  eventually,
  startTestOrchestrator,
  type TestOrchestrator,
} from '../../helpers/orchestrator.js';

/**
 * With the default `enforceCgroups: false`, a daemon a job started with setsid left the agent's
 * process group and outlived the job, the agent and the server. Process-mode teardown now also
 * finds the agent's processes by the KICI_AGENT_ID in their environment.
 */

let t: TestOrchestrator | undefined;
const tagged = useTaggedJobs();
const markers: string[] = [];
afterEach(async () => {
  await t?.stop();
  t = undefined;
  for (const m of markers.splice(0)) killAll(await liveWithMarker(m));
});

const config = () => bareMetalConfig({ maxAgents: 2 }, [{ labels: ['linux'], binaryPath: AGENT_BIN }]);

describe('adversarial: daemons started by a job do not outlive it (process mode)', () => {
  it('a setsid daemon is gone when its job ends', async () => {
    t = await startTestOrchestrator({ config: config() });
    const { tag, job } = tagged.job([
      { name: 'daemon', run: 'setsid sh -c "trap \'\' HUP; sleep 1000" > /dev/null 2>&1 &' },
    ]);
    const [id] = await submit(t, { d: job });
    expect((await t.waitForJob(id!, undefined, 30_000)).state).toBe('succeeded');
    expect(await tagged.alive(tag)).toBe(0);
  });

  it('a daemon that hides from its job is still removed with its agent', async () => {
    t = await startTestOrchestrator({ config: config() });
    // Dropping the job's marker escapes the job's clean-up, but not the agent's teardown.
    const { tag, job } = tagged.job([
      { name: 'daemon', run: 'env -u KICI_JOB_MARKER setsid sleep 1000 > /dev/null 2>&1 &' },
    ]);
    const [id] = await submit(t, { d: job });
    expect((await t.waitForJob(id!, undefined, 30_000)).state).toBe('succeeded');
    await eventually(async () => (await tagged.alive(tag)) === 0, 15_000, 'daemon removed with the agent');
  });

  it('an agent killed mid-job: teardown still finds the daemons its job started', async () => {
    t = await startTestOrchestrator({ config: config() });
    const { tag, job } = tagged.job([
      { name: 'daemon', run: 'setsid sleep 1000 > /dev/null 2>&1 & echo "agent=$PPID"; sleep 1000' },
    ]);
    const [id] = await submit(t, { d: job });
    const agentPid = Number((await waitForLine(t, id!, /^agent=(\d+)$/))[1]);
    expect(await tagged.alive(tag)).toBeGreaterThanOrEqual(2);
    process.kill(agentPid, 'SIGKILL');
    expect((await t.waitForJob(id!, undefined, 30_000)).state).toBe('failed');
    await eventually(async () => (await tagged.alive(tag)) === 0, 15_000, 'daemons removed at teardown');
  });

  it('no cgroups: a setsid daemon, a double-forked grandchild and an own-group child are gone after the job (checked in /proc)', async () => {
    t = await startTestOrchestrator({ config: config() });
    const d = daemonScript(false);
    markers.push(d.marker);
    const [id] = await submit(t, { d: { runsOn: ['linux'], steps: [{ run: d.script }] } });
    await waitForLine(t, id!, /^daemons-started$/);
    expect((await liveWithMarker(d.marker)).length).toBe(d.count);
    expect((await t.waitForJob(id!, undefined, 30_000)).state).toBe('succeeded');
    await eventually(
      async () => (await liveWithMarker(d.marker)).length === 0,
      15_000,
      'every daemon gone after the job',
    );
  });

  it('orchestrator stop leaves no daemon of a running job behind', async () => {
    t = await startTestOrchestrator({ config: config() });
    const { tag, job } = tagged.job([
      { name: 'daemon', run: 'setsid sleep 1000 > /dev/null 2>&1 & echo up; sleep 1000' },
    ]);
    const [id] = await submit(t, { d: job });
    await waitForLine(t, id!, /^up$/);
    expect(await tagged.alive(tag)).toBeGreaterThanOrEqual(2);
    await t.stop();
    t = undefined;
    expect(await tagged.alive(tag)).toBe(0);
  });
});
