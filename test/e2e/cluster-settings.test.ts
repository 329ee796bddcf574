import { afterEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/util/clock.js';
import {
  ADMIN_BIN,
  bareMetalConfig,
  eventually,
  runNode,
  startTestOrchestrator,
  type TestOrchestrator,
} from '../helpers/orchestrator.js';

/**
 * `kici-admin cluster-settings`: a value set through the CLI is in force on the running instance at
 * once, without a restart. Proven on a manual clock through the provisioning backoff: the clock does
 * not move, so the first deferral after a failed launch is exactly the backoff base in force.
 */

let t: TestOrchestrator | undefined;
afterEach(async () => {
  await t?.stop();
  t = undefined;
});

const broken = () => bareMetalConfig({}, [{ labels: ['linux', 'small'], binaryPath: '/bin/false' }]);

interface Setting {
  key: string;
  value: number | null;
  instanceValue: number;
  effective: number;
}

const admin = (args: string[], token = t!.orch.adminToken) =>
  runNode([ADMIN_BIN, ...args], { KICI_URL: t!.orch.url, KICI_ADMIN_TOKEN: token }).exited;

async function retryInMs(): Promise<number | undefined> {
  const { body } = await t!.api<{ scalers: { backoff: { retryInMs: number }[] }[] }>(
    'GET',
    '/api/v1/scaler/status',
  );
  return body.scalers.flatMap((s) => s.backoff)[0]?.retryInMs;
}

describe('cluster settings on one instance', () => {
  it('a backoff base set with the CLI is the next deferral; "default" gives the instance its own back', async () => {
    t = await startTestOrchestrator({ config: broken(), clock: new ManualClock() });
    const set = await admin([
      'cluster-settings',
      'set',
      'scaler_provision_backoff_base_ms',
      '7000',
      '--json',
    ]);
    expect(set.code, set.stderr).toBe(0);
    const after = (JSON.parse(set.stdout) as { settings: Setting[] }).settings;
    expect(after.find((s) => s.key === 'scaler_provision_backoff_base_ms')).toMatchObject({
      value: 7000,
      instanceValue: 30_000,
      effective: 7000,
    });

    await t.api('POST', '/api/v1/runs', {
      jobs: { a: { runsOn: ['linux', 'small'], steps: [{ run: 'echo ok' }] } },
    });
    await eventually(async () => (await retryInMs()) !== undefined, 20_000, 'the label set backing off');
    expect(await retryInMs()).toBe(7000);

    const cleared = await admin(['cluster-settings', 'set', '--scaler-provision-backoff-base-ms', 'default']);
    expect(cleared.code, cleared.stderr).toBe(0);
    expect(cleared.stdout).toMatch(/scaler_provision_backoff_base_ms\s+default\s+30000\s+30000/);
    const show = await admin(['cluster-settings', 'show', '--json']);
    expect(show.code, show.stderr).toBe(0);
    const rows = (JSON.parse(show.stdout) as { settings: Setting[] }).settings;
    expect(rows.map((r) => r.value)).toEqual(rows.map(() => null));
  });

  it('refuses a value below its minimum or a maximum below the base: exit 2, the field named', async () => {
    t = await startTestOrchestrator({});
    const low = await admin(['cluster-settings', 'set', 'scaler_reap_interval_ms', '4999', '--json']);
    expect(low.code).toBe(2);
    expect(low.stderr).toBe('');
    expect(JSON.parse(low.stdout)).toMatchObject({
      problems: [
        expect.stringMatching(/^scaler_reap_interval_ms: expected whole milliseconds of at least 5000/),
      ],
    });
    const unknown = await admin(['cluster-settings', 'set', 'spawn_timeout', '5000']);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toMatch(/spawn_timeout: not a cluster setting/);
    // Judged by the server against the stored values: a 400 naming the field, exit 2.
    const below = await admin([
      'cluster-settings',
      'set',
      'scaler_provision_backoff_max_ms',
      '20000',
      '--json',
    ]);
    expect(below.code).toBe(2);
    expect(below.stdout).toMatch(
      /scaler_provision_backoff_max_ms: 20000 would be below the backoff base \(30000\)/,
    );
    const api = await t.api('PUT', '/api/v1/cluster/settings', { values: { agent_token_ttl_ms: 'soon' } });
    expect(api.status).toBe(400);
    expect(JSON.stringify(api.body)).toMatch(/agent_token_ttl_ms/);
  });

  it('admins only, and each change is in the audit trail', async () => {
    t = await startTestOrchestrator({});
    const made = await t.api<{ token: string }>('POST', '/api/v1/access/tokens', {
      name: 'ops',
      role: 'operator',
    });
    expect(made.status).toBe(201);
    const refused = await admin(['cluster-settings', 'set', 'agent_token_ttl_ms', '60000'], made.body.token);
    expect(refused.code).toBe(1);
    const view = await admin(['cluster-settings', 'show'], made.body.token);
    expect(view.code, view.stderr).toBe(0);
    const ok = await admin(['cluster-settings', 'set', 'agent_token_ttl_ms', '60000']);
    expect(ok.code, ok.stderr).toBe(0);
    const audit = await t.api<{ entries: { action: string; target: string | null; result: string }[] }>(
      'GET',
      '/api/v1/audit',
    );
    const rows = audit.body.entries.filter((e) => e.action === 'cluster.settings-set');
    expect(rows.map((r) => [r.target, r.result])).toEqual(
      expect.arrayContaining([
        ['agent_token_ttl_ms', 'ok'],
        [null, 'denied'],
      ]),
    );
  });
});
