import { afterEach, describe, expect, it } from 'vitest';
import { detectCgroups } from '../../src/scaler/backends/bare-metal/cgroups.js';
import { submit, waitForLine } from '../helpers/jobs.js';
import { daemonScript, killAll, liveWithMarker } from '../helpers/marked-daemons.js';
import {
  AGENT_BIN,
  bareMetalConfig,
  eventually,
  startTestOrchestrator,
  type TestOrchestrator,
} from '../helpers/orchestrator.js';

/**
 * Teardown with `enforceCgroups: true` (root, v1 hybrid here: freezer + the v2 `unified` group's
 * cgroup.kill): a step's setsid daemon, double-forked grandchild, own-group child and a daemon that
 * wiped its whole environment are all gone after the job, checked in /proc; and a step over its
 * memory limit fails with a reason that says it ran out of memory.
 */

let t: TestOrchestrator | undefined;
const markers: string[] = [];
afterEach(async () => {
  await t?.stop();
  t = undefined;
  for (const m of markers.splice(0)) killAll(await liveWithMarker(m));
});

describe('bare-metal whole-tree teardown and OOM with cgroups', () => {
  it('leaves nothing alive after the job: setsid, double fork, own group, scrubbed env', async () => {
    const driver = await detectCgroups();
    expect(driver, 'a usable cgroup hierarchy').toBeDefined();
    t = await startTestOrchestrator({
      config: bareMetalConfig({ enforceCgroups: true }, [{ labels: ['linux'], binaryPath: AGENT_BIN }]),
    });
    const d = daemonScript(true);
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

  it('a step over its memory limit fails and its reason says it ran out of memory', async () => {
    t = await startTestOrchestrator({
      config: bareMetalConfig({ enforceCgroups: true }, [
        { labels: ['linux'], binaryPath: AGENT_BIN, resources: { limits: { memory: '96m' } } },
      ]),
    });
    const [hog, plain] = await submit(t, {
      hog: {
        runsOn: ['linux'],
        steps: [{ name: 'hog', run: 'node -e "const a=[];for(;;)a.push(Buffer.alloc(1<<20,1))"' }],
      },
      // A plain SIGKILL is not an OOM: its reason must not claim one.
      plain: { runsOn: ['linux'], steps: [{ name: 'killed', run: 'kill -9 $$' }] },
    });
    const job = await t.waitForJob(hog!, undefined, 60_000);
    expect(job.state).toBe('failed');
    expect(job.exitCode).toBe(137);
    expect(job.reason).toMatch(/^step "hog" ran out of memory: .*memory limit of 96 MiB$/);
    const other = await t.waitForJob(plain!, undefined, 60_000);
    expect(other.state).toBe('failed');
    expect(other.exitCode).toBe(137);
    expect(other.reason ?? '').not.toMatch(/memory/);
  });
});
