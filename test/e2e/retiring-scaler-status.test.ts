/**
 * Retiring scalers: a reload that removes a scaler while its agent runs a job keeps the scaler in
 * `GET /api/v1/scaler/status` and in `kici-admin scaler status`, marked retiring, with that agent,
 * until the agent has gone; then the scaler disappears from both.
 */
import { readFile, writeFile } from 'node:fs/promises';
import { parse, stringify } from 'yaml';
import { afterEach, describe, expect, it } from 'vitest';
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

interface StatusBody {
  scalers: { name: string; retiring: boolean; agents: { agentId: string; phase: string }[] }[];
}

describe('scaler status while a removed scaler drains', () => {
  it('lists the retiring scaler with its running agent until the agent is gone', async () => {
    const config = bareMetalConfig();
    config.scalers.push({
      name: 'old',
      type: 'bare-metal',
      maxAgents: 1,
      labelSets: [{ labels: ['retire-me'], binaryPath: AGENT_BIN, trust: 'host' }],
    } as never);
    t = await startTestOrchestrator({ config });
    const run = await t.api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
      jobs: { slow: { runsOn: ['retire-me'], steps: [{ run: 'sleep 3' }] } },
    });
    const jobId = run.body.jobs[0]!.id;
    const running = await t.waitForJob(jobId, ['running'], 30_000);

    const path = t.orch.opts.scalerConfigPath!;
    const without = parse(await readFile(path, 'utf8')) as typeof config;
    without.scalers = without.scalers.filter((s) => s.name !== 'old');
    await writeFile(path, stringify(without));
    const reload = await t.api<{ result: string; plan: { retired: string[] } }>(
      'POST',
      '/api/v1/scaler/reload',
    );
    expect(reload.body).toMatchObject({ result: 'applied', plan: { retired: ['old'] } });

    const status = await t.api<StatusBody>('GET', '/api/v1/scaler/status');
    expect(status.body.scalers.map((s) => [s.name, s.retiring])).toEqual([
      ['bm', false],
      ['old', true],
    ]);
    expect(status.body.scalers[1]!.agents).toEqual([
      expect.objectContaining({ agentId: running.agentId, phase: 'busy' }),
    ]);
    const admin = await runNode([ADMIN_BIN, 'scaler', 'status'], {
      KICI_SERVER_URL: t.orch.url,
      KICI_ADMIN_TOKEN: t.orch.adminToken,
    }).exited;
    expect(admin.code).toBe(0);
    expect(admin.stdout).toMatch(/old \(retiring\)\s+bare-metal/);
    expect(admin.stdout).toContain(`old: retiring, 1 agent(s) left: ${running.agentId} (busy)`);

    expect((await t.waitForJob(jobId)).state).toBe('succeeded');
    await eventually(
      async () => (await t!.api<StatusBody>('GET', '/api/v1/scaler/status')).body.scalers.length === 1,
      15_000,
      'the drained scaler gone from status',
    );
    const after = await runNode([ADMIN_BIN, 'scaler', 'status'], {
      KICI_SERVER_URL: t.orch.url,
      KICI_ADMIN_TOKEN: t.orch.adminToken,
    }).exited;
    expect(after.stdout).not.toMatch(/^old\b/m);
  });
});
