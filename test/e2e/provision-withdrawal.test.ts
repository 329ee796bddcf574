/**
 * A provision whose job was cancelled before its agent registered is withdrawn well inside 30 s (at
 * once, when the instance hears the cancel; the periodic sweep is the backstop), not at the
 * 5-minute spawn deadline: a bare-metal agent process that never dials in is killed, an event
 * instance gets its scale-down job-complete.
 */
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { makeEventCloud, type EventCloud } from '../helpers/event-instance.js';
import {
  bareMetalConfig,
  eventually,
  scalerIdle,
  startTestOrchestrator,
  type TestOrchestrator,
} from '../helpers/orchestrator.js';
import { pidsWithEnv } from '../helpers/processes.js';

const WITHIN_MS = 30_000;
let t: TestOrchestrator | undefined;
const dirs: string[] = [];
afterEach(async () => {
  await t?.stop();
  t = undefined;
  for (const d of dirs.splice(0)) await rm(d, { recursive: true, force: true });
});

interface EventView {
  event: string;
  agentId: string;
  reason: string | null;
}

describe('withdrawal of a provision whose job ended before its agent registered', () => {
  it('bare-metal: the agent process that never registers is killed soon after the cancel', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'kici-withdraw-'));
    dirs.push(dir);
    // Starts and stays up, but never dials the orchestrator (a hung start-up).
    const bin = join(dir, 'hung-agent');
    await writeFile(bin, '#!/bin/sh\nexec sleep 600\n');
    await chmod(bin, 0o755);
    t = await startTestOrchestrator({
      config: bareMetalConfig({}, [{ labels: ['linux', 'hung'], binaryPath: bin }]),
    });
    const { body } = await t.api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
      jobs: { a: { runsOn: ['linux', 'hung'], steps: [{ run: 'true' }] } },
    });
    const jobId = body.jobs[0]!.id;
    const agentId = await eventually(
      () => t!.orch.scaler!.entries().find((m) => m.boundJobId === jobId && m.phase === 'starting')?.agentId,
      20_000,
      'the agent process started',
    );
    expect(await pidsWithEnv(`KICI_AGENT_ID=${agentId}`)).not.toEqual([]);
    const cancelledAt = Date.now();
    await t.api('POST', `/api/v1/jobs/${jobId}/cancel`);
    await eventually(
      async () => (await pidsWithEnv(`KICI_AGENT_ID=${agentId}`)).length === 0,
      WITHIN_MS,
      'the agent process killed',
    );
    expect(Date.now() - cancelledAt).toBeLessThan(WITHIN_MS);
    // The teardown drops the records after the process is gone: wait for that, not for a time.
    await eventually(() => scalerIdle(t!.orch.scaler!), 10_000, 'the entry dropped');
    await eventually(
      async () =>
        (await t!.orch.store.db.selectFrom('scaler_spawning_agents').selectAll().execute()).length === 0,
      10_000,
      'the spawn row dropped',
    );
  }, 60_000);

  it('event: the instance that never connects gets its scale-down job-complete soon after the cancel', async () => {
    const cloud: EventCloud = await makeEventCloud({});
    dirs.push(cloud.dir);
    t = await startTestOrchestrator({ scalerConfigPath: cloud.configPath });
    // The provisioning job fails to boot anything: the scale-up is out, no agent will ever register.
    await rm(join(cloud.dir, 'instance.mjs'));
    const { body } = await t.api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
      jobs: { work: { runsOn: ['cloud'], steps: [{ run: 'true' }] } },
    });
    const jobId = body.jobs[0]!.id;
    const events = async () => (await t!.api<{ events: EventView[] }>('GET', '/api/v1/events')).body.events;
    await eventually(
      async () =>
        (await events()).some((e) => e.event === 'kici.scaler.scale-up') &&
        t!.orch.scaler!.entries().some((m) => m.boundJobId === jobId && m.phase === 'starting'),
      20_000,
      'the scale-up out',
    );
    const cancelledAt = Date.now();
    await t.api('POST', `/api/v1/jobs/${jobId}/cancel`);
    const down = await eventually(
      async () => (await events()).find((e) => e.event === 'kici.scaler.scale-down'),
      WITHIN_MS,
      'the scale-down',
    );
    expect(Date.now() - cancelledAt).toBeLessThan(WITHIN_MS);
    expect(down.reason).toBe('job-complete');
    expect((await events()).filter((e) => e.event === 'kici.scaler.scale-down')).toHaveLength(1);
    // The claim code is voided right after the scale-down is out.
    await eventually(
      async () =>
        (await t!.orch.store.db.selectFrom('scaler_pending_claims').selectAll().execute()).length === 0,
      10_000,
      'the claim code voided',
    );
    const metrics = await (
      await fetch(`${t.orch.url}/metrics`, { headers: { authorization: `Bearer ${t.orch.adminToken}` } })
    ).text();
    expect(metrics).not.toMatch(/kici_orch_scaler_external_provision_timeout_total\{[^}]*\} [1-9]/);
  }, 90_000);
});
