/**
 * Single use does not depend on the instance's environment: an event instance booted without
 * KICI_SCALER_MANAGED (a careless provisioner) runs its bound job, is told to leave, and gets
 * exactly one scale-down with reason job-complete; nothing of it is left.
 */
import { readFile, readdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { makeEventCloud, type EventCloud } from '../helpers/event-instance.js';
import {
  eventually,
  scalerIdle,
  startTestOrchestrator,
  type TestOrchestrator,
} from '../helpers/orchestrator.js';
import { pidsWithEnv } from '../helpers/processes.js';

let t: TestOrchestrator | undefined;
let cloud: EventCloud | undefined;
afterEach(async () => {
  await t?.stop();
  t = undefined;
  if (cloud) await rm(cloud.dir, { recursive: true, force: true });
  cloud = undefined;
});

async function events(c: EventCloud): Promise<{ name: string; agentId: string; reason: string | null }[]> {
  const text = await readFile(join(c.stateDir, 'events.log'), 'utf8').catch(() => '');
  return text
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as { name: string; agentId: string; reason: string | null });
}

describe('event instance started without KICI_SCALER_MANAGED', () => {
  it('runs its bound job, then gets exactly one scale-down job-complete; nothing is left', async () => {
    cloud = await makeEventCloud({ mode: 'ws', scalerManagedEnv: false });
    t = await startTestOrchestrator({ scalerConfigPath: cloud.configPath });
    const { body } = await t.api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
      jobs: { work: { runsOn: ['cloud'], steps: [{ run: 'echo unmanaged-ran' }] } },
    });
    const done = await t.waitForJob(body.jobs[0]!.id, undefined, 90_000);
    expect(done.state, String(done.reason)).toBe('succeeded');
    const agentId = done.agentId!;
    expect(agentId).toMatch(/^scaler-event-/);

    // The scale-down provisioning job runs and stops the instance (its pid file goes).
    await eventually(
      async () => (await readdir(cloud!.stateDir)).every((f) => !f.endsWith('.pid')),
      60_000,
      'the instance stopped by the scale-down',
    );
    await eventually(
      async () => (await pidsWithEnv(`KICI_AGENT_ID=${agentId}`)).length === 0,
      10_000,
      'the instance agent gone from /proc',
    );
    await eventually(() => scalerIdle(t!.orch.scaler!), 20_000, 'all scaler agents torn down');
    const seen = await events(cloud);
    expect(seen.map((e) => [e.name, e.agentId, e.reason])).toEqual([
      ['kici.scaler.scale-up', agentId, null],
      ['kici.scaler.scale-down', agentId, 'job-complete'],
    ]);
    await eventually(
      async () =>
        (await t!.orch.store.db.selectFrom('scaler_spawning_agents').selectAll().execute()).length === 0,
      10_000,
      'spawn records deleted (the provisioning agents leave too)',
    );
    const metrics = await (
      await fetch(`${t.orch.url}/metrics`, { headers: { authorization: `Bearer ${t.orch.adminToken}` } })
    ).text();
    expect(metrics).toMatch(
      /kici_orch_scaler_scale_down_emitted_total\{scaler="cloud",reason="job-complete"\} 1/,
    );
  }, 120_000);
});
