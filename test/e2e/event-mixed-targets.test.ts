/**
 * Mixed provisioning targets: one `job:` target whose template broke after start-up, one webhook
 * that works. The job gets exactly one scale-up at the webhook (the broken sibling does not fail
 * the spawn, so nothing is provisioned again and the claim stays valid), and exactly one matching
 * scale-down once the job no longer needs the instance.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { afterEach, describe, expect, it } from 'vitest';
import { eventually, startTestOrchestrator, type TestOrchestrator } from '../helpers/orchestrator.js';

interface Hook {
  event: string;
  payload: { agentId: string; reason?: string };
}

let t: TestOrchestrator | undefined;
const cleanup: (() => Promise<void>)[] = [];
afterEach(async () => {
  await t?.stop();
  t = undefined;
  for (const c of cleanup.splice(0)) await c();
});

async function receiver() {
  const got: Hook[] = [];
  const server: Server = createServer((req, res) => {
    let raw = '';
    req.on('data', (d) => (raw += String(d)));
    req.on('end', () => {
      got.push(JSON.parse(raw) as Hook);
      res.statusCode = 204;
      res.end();
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  cleanup.push(() => new Promise<void>((r) => server.close(() => r())));
  return { got, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook` };
}

describe('one broken target beside a working one', () => {
  it('each job gets one scale-up per working target and one matching scale-down', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'kici-mixed-'));
    cleanup.push(() => rm(dir, { recursive: true, force: true }));
    const template = join(dir, 'provision.yaml');
    await writeFile(template, stringify({ jobs: { p: { runsOn: ['nowhere'], steps: [{ run: 'true' }] } } }));
    const rx = await receiver();
    const configPath = join(dir, 'scalers.yaml');
    await writeFile(
      configPath,
      stringify({
        version: 1,
        scalers: [
          {
            name: 'cloud',
            type: 'event',
            maxAgents: 4,
            labelSets: [{ labels: ['cloud'] }],
            provisioningTargets: ['job:provision.yaml', `webhook:${rx.url}`],
          },
        ],
      }),
    );
    t = await startTestOrchestrator({
      scalerConfigPath: configPath,
      hostEnv: { ...process.env, KICI_SCALER_WEBHOOK_SECRET: 'mixed-secret' },
    });
    // The template breaks while the orchestrator runs (edited by hand, say).
    await writeFile(template, stringify({ version: 1, scalers: [] }));
    const { body } = await t.api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
      jobs: {
        a: { runsOn: ['cloud'], steps: [{ run: 'true' }] },
        b: { runsOn: ['cloud'], steps: [{ run: 'true' }] },
      },
    });
    const jobIds = body.jobs.map((j) => j.id);
    await eventually(
      () => rx.got.filter((h) => h.event === 'kici.scaler.scale-up').length >= 2,
      20_000,
      'scale-ups',
    );
    // The claims were not voided: each provision could still register.
    const claims = await t.orch.store.db.selectFrom('scaler_pending_claims').select('agent_id').execute();
    expect(claims.map((c) => c.agent_id).sort()).toEqual(
      rx.got
        .filter((h) => h.event === 'kici.scaler.scale-up')
        .map((h) => h.payload.agentId)
        .sort(),
    );
    for (const id of jobIds) await t.api('POST', `/api/v1/jobs/${id}/cancel`);
    await eventually(
      () => rx.got.filter((h) => h.event === 'kici.scaler.scale-down').length >= 2,
      30_000,
      'scale-downs',
    );
    await t.orch.scaleEvents!.settle();
    const ups = rx.got.filter((h) => h.event === 'kici.scaler.scale-up').map((h) => h.payload.agentId);
    const downs = rx.got.filter((h) => h.event === 'kici.scaler.scale-down');
    expect(ups).toHaveLength(2);
    expect(new Set(ups).size).toBe(2);
    expect(downs.map((h) => h.payload.agentId).sort()).toEqual([...ups].sort());
    expect(downs.map((h) => h.payload.reason)).toEqual(['job-complete', 'job-complete']);
    expect(t.orch.scaler!.entries()).toEqual([]);
  }, 90_000);
});
