import { access } from 'node:fs/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { detectCgroups } from '../../src/scaler/backends/bare-metal/cgroups.js';
import {
  AGENT_BIN,
  bareMetalConfig,
  eventually,
  scalerIdle,
  startTestOrchestrator,
  type TestOrchestrator,
} from '../helpers/orchestrator.js';

let t: TestOrchestrator | undefined;
afterEach(async () => {
  await t?.stop();
  t = undefined;
});

const exists = (p: string) =>
  access(p).then(
    () => true,
    () => false,
  );

describe('bare-metal limits are enforced with cgroups (root)', () => {
  it('puts the agent and its steps in a cgroup with the label set limits, and removes it afterwards', async () => {
    const driver = await detectCgroups();
    expect(driver, 'a usable cgroup hierarchy under /sys/fs/cgroup').toBeDefined();
    t = await startTestOrchestrator({
      config: bareMetalConfig({ enforceCgroups: true }, [
        {
          labels: ['linux', 'limited'],
          binaryPath: AGENT_BIN,
          resources: { limits: { cpus: 0.5, memory: '96m' } },
        },
      ]),
    });
    const memFile = driver!.version === 2 ? 'memory.max' : 'memory.limit_in_bytes';
    const memDir = driver!.version === 2 ? '/sys/fs/cgroup/kici' : '/sys/fs/cgroup/memory/kici';
    const cpuFile =
      driver!.version === 2
        ? '/sys/fs/cgroup/kici/$KICI_AGENT_ID/cpu.max'
        : '/sys/fs/cgroup/cpu/kici/$KICI_AGENT_ID/cpu.cfs_quota_us';
    const run = await t.api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
      jobs: {
        inspect: {
          runsOn: ['linux', 'limited'],
          steps: [
            {
              run: `grep -c "kici/$KICI_AGENT_ID" /proc/self/cgroup; cat ${memDir}/$KICI_AGENT_ID/${memFile}; cat ${cpuFile}`,
            },
          ],
        },
        hog: {
          runsOn: ['linux', 'limited'],
          steps: [{ run: 'node -e "const a=[];for(;;)a.push(Buffer.alloc(1<<20,1))"' }],
        },
      },
    });
    const [inspect, hog] = await Promise.all(
      run.body.jobs.map((j) => t!.waitForJob(j.id, undefined, 90_000)),
    );
    expect(inspect!.state).toBe('succeeded');
    const lines = (
      await t.api<{ lines: { line: string; stream: string }[] }>('GET', `/api/v1/jobs/${inspect!.id}/logs`)
    ).body.lines
      .filter((l) => l.stream === 'stdout')
      .map((l) => l.line);
    expect(Number(lines[0])).toBeGreaterThan(0);
    expect(lines[1]).toBe(String(96 * 1024 * 1024));
    expect(lines[2]).toMatch(/^50000( 100000)?$/);
    // The memory hog is killed by the kernel at the limit: its step fails with SIGKILL.
    expect(hog!.state).toBe('failed');
    expect(hog!.exitCode).toBe(137);
    await eventually(() => scalerIdle(t!.orch.scaler!), 15_000, 'agents torn down');
    for (const id of [inspect!.agentId!, hog!.agentId!]) {
      await eventually(async () => !(await exists(`${memDir}/${id}`)), 10_000, `cgroup of ${id} removed`);
    }
  });
});
