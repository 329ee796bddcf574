/**
 * With maxAgents 2, a warm pool of 2 on label set A, and a job for label set B, the B job starts
 * within a few seconds by retiring a warm A agent (destroy reason `idle`). Before, the two idle
 * warm agents held both slots and the B job waited "at maxAgents" for good. `scaler status` names
 * each pool's label set, in table and JSON form.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { DestroyContext } from '../../src/scaler/types.js';
import {
  ADMIN_BIN,
  AGENT_BIN,
  bareMetalConfig,
  eventually,
  runNode,
  startTestOrchestrator,
  type TestOrchestrator,
} from '../helpers/orchestrator.js';

let t: TestOrchestrator | undefined;
afterEach(async () => {
  await t?.stop();
  t = undefined;
});

// A declares a size, so the pool keeps it warm; B declares none, so the pool skips it.
const config = bareMetalConfig(
  { maxAgents: 2, warmPool: { enabled: true, size: 2, idleTimeoutSeconds: 600 } },
  [
    { labels: ['linux', 'a'], binaryPath: AGENT_BIN, resources: { requests: { cpus: 0.5 } } },
    { labels: ['linux', 'b'], binaryPath: AGENT_BIN },
  ],
);

describe('warm pool vs queued work', () => {
  it('a job for label set B starts within seconds by retiring a warm A agent (reason idle)', async () => {
    t = await startTestOrchestrator({ config });
    const scaler = t.orch.scaler!;
    const pool = scaler.warm.specs()[0]!;
    expect(pool.labelSetKey).toBe('a,linux');
    await eventually(() => scaler.warm.ready(pool).length === 2, 20_000, 'two warm A agents ready');
    const warmIds = scaler.warm.ready(pool).map((a) => a.agentId);

    // Record destroy reasons on the real backend.
    const backend = scaler.state.backends.get('bm')!;
    const destroys: { agentId: string; reason: DestroyContext['reason'] }[] = [];
    const destroy = backend.destroy.bind(backend);
    backend.destroy = (agentId, ctx) => {
      destroys.push({ agentId, reason: ctx.reason });
      return destroy(agentId, ctx);
    };

    const status = await runNode([ADMIN_BIN, 'scaler', 'status'], {
      KICI_SERVER_URL: t.orch.url,
      KICI_DATA_DIR: t.dataDir,
    }).exited;
    expect(status.code).toBe(0);
    expect(status.stdout).toContain('[a,linux] 2/2');
    expect(status.stdout).toContain('the warm pool skips label set [b,linux]: declare resources');
    const json = await runNode([ADMIN_BIN, 'scaler', 'status', '--json'], {
      KICI_SERVER_URL: t.orch.url,
      KICI_DATA_DIR: t.dataDir,
    }).exited;
    const view = JSON.parse(json.stdout) as {
      scalers: { warmPool: { pools: { labelSet: string; labels: string[] }[]; skipped: unknown[] } }[];
    };
    expect(view.scalers[0]!.warmPool.pools).toMatchObject([
      { labelSet: 'a,linux', labels: expect.arrayContaining(['linux', 'a']) },
    ]);
    expect(view.scalers[0]!.warmPool.skipped).toMatchObject([{ labelSet: 'b,linux' }]);

    const submitted = Date.now();
    const run = await t.api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
      jobs: { b: { runsOn: ['linux', 'b'], steps: [{ run: 'echo on-b' }] } },
    });
    const jobId = run.body.jobs[0]!.id;
    const started = await t.waitForJob(jobId, ['running', 'succeeded', 'failed'], 15_000);
    const startMs = Date.now() - submitted;
    expect(started.state).not.toBe('failed');
    expect(startMs).toBeLessThan(10_000);
    expect(warmIds).not.toContain(started.agentId);
    const retired = destroys.filter((d) => warmIds.includes(d.agentId));
    expect(retired).toHaveLength(1);
    expect(retired[0]!.reason).toBe('idle');
    expect((await t.waitForJob(jobId)).state).toBe('succeeded');
    console.log(`B job started ${startMs} ms after submission`);
  });
});
