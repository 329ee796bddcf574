/**
 * Every scaler metric name and label docs/metrics.md lists shows in a live scrape, after a burst on
 * real bare-metal agents that also fills a warm pool and fails a spawn: the queue by label set,
 * agents by scaler, backend and state, caps in use against their maximum, spawn failures with their
 * scaler, and the runtime metrics under one `kici_orch_` prefix (never `process_process_`).
 */
import { chmod, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  AGENT_BIN,
  bareMetalConfig,
  eventually,
  startTestOrchestrator,
  type TestOrchestrator,
} from '../helpers/orchestrator.js';
import { parsePromText, type MetricFamily } from '../helpers/prom-text.js';
import { SPEC_METRICS } from '../helpers/spec-metrics.js';
import { tempDir } from '../helpers/temp-dirs.js';

let t: TestOrchestrator;
let families: Map<string, MetricFamily>;
let text: string;

beforeAll(async () => {
  // An agent binary that exits at once: every spawn of the `broken` label set fails.
  const dir = await tempDir('kici-broken-agent-');
  const broken = join(dir, 'kici-agent');
  await writeFile(broken, '#!/bin/sh\necho "cannot start" >&2\nexit 3\n');
  await chmod(broken, 0o755);
  const config = bareMetalConfig(
    { maxAgents: 4, warmPool: { enabled: true, size: 1, idleTimeoutSeconds: 600 } },
    [
      { labels: ['linux', 'warm'], binaryPath: AGENT_BIN, resources: { requests: { cpus: 0.5 } } },
      { labels: ['linux', 'small'], binaryPath: AGENT_BIN },
      { labels: ['linux', 'broken'], binaryPath: broken },
    ],
  );
  t = await startTestOrchestrator({ config });
  const scaler = t.orch.scaler!;
  await eventually(() => scaler.warm.ready(scaler.warm.specs()[0]!).length === 1, 20_000, 'warm agent ready');
  const run = await t.api<{ jobs: { id: string; name: string }[] }>('POST', '/api/v1/runs', {
    jobs: {
      a: { runsOn: ['linux', 'small'], steps: [{ run: 'true' }] },
      b: { runsOn: ['linux', 'small'], steps: [{ run: 'sleep 0.2' }] },
      broken: { runsOn: ['linux', 'broken'], steps: [{ run: 'true' }] },
    },
  });
  const [a, b, failing] = run.body.jobs;
  await Promise.all([a, b].map((j) => t.waitForJob(j!.id)));
  await eventually(
    async () =>
      (await t.api<{ lastProvisioningError: string | null }>('GET', `/api/v1/jobs/${failing!.id}`)).body
        .lastProvisioningError,
    20_000,
    'spawn failure recorded',
  );
  text = await (
    await fetch(`${t.orch.url}/metrics`, { headers: { authorization: `Bearer ${t.orch.adminToken}` } })
  ).text();
  families = parsePromText(text);
}, 120_000);

afterAll(async () => {
  await t?.stop();
});

describe('documented metric names in a live scrape', () => {
  it.each(Object.entries(SPEC_METRICS))('%s is exposed with its labels', (name, labels) => {
    const f = families.get(name);
    expect(f, `${name} missing from the scrape`).toBeDefined();
    for (const s of f!.samples) for (const l of labels) expect(Object.keys(s.labels)).toContain(l);
  });

  it('exercised series carry values from the burst', () => {
    const samples = (name: string) => families.get(name)!.samples;
    expect(samples('kici_orch_scaler_spawn_failures_total')).toContainEqual(
      expect.objectContaining({
        labels: { scaler: 'bm', backend: 'bare-metal', bound: 'true', kind: 'exited-before-register' },
      }),
    );
    expect(samples('kici_orch_scaler_warm_pool_target')).toEqual([
      expect.objectContaining({ labels: { scaler: 'bm', label_set: 'linux,warm' }, value: 1 }),
    ]);
    expect(samples('kici_orch_scaler_warm_pool_spawns_total')[0]!.value).toBeGreaterThanOrEqual(1);
    expect(samples('kici_orch_scaler_cpus_used')).toEqual([
      expect.objectContaining({
        labels: { scaler: 'bm', backend: 'bare-metal', scaler_type: 'bare-metal', machine_pool: '' },
      }),
    ]);
  });

  it('counts queued jobs by label set', () => {
    // The broken job waits in the queue: its spawn keeps failing.
    expect(families.get('kici_orch_jobs_queued')!.samples).toEqual([
      { name: 'kici_orch_jobs_queued', labels: { label_set: 'broken,linux' }, value: 1 },
    ]);
  });

  it('counts agents by scaler, backend and state, and caps in use against their maximum', () => {
    const agents = families.get('kici_orch_agents')!.samples;
    expect(agents).toContainEqual(
      expect.objectContaining({ labels: { scaler: 'bm', backend: 'bare-metal', state: 'idle' } }),
    );
    expect(agents).toContainEqual({
      name: 'kici_orch_agents',
      labels: { scaler: '', backend: 'static', state: 'busy' },
      value: 0,
    });
    const max = families.get('kici_orch_scaler_cap_max')!.samples;
    expect(max).toContainEqual(
      expect.objectContaining({
        labels: { scaler: 'bm', backend: 'bare-metal', resource: 'agents' },
        value: 4,
      }),
    );
    const used = families.get('kici_orch_scaler_cap_used')!.samples;
    const agentsUsed = used.find((s) => s.labels.resource === 'agents')!;
    expect(agentsUsed.value).toBeGreaterThanOrEqual(1);
    expect(agentsUsed.value).toBeLessThanOrEqual(4);
  });

  it('names the runtime metrics with one prefix', () => {
    expect(text).not.toContain('kici_orch_process_process_');
    expect(families.get('kici_orch_process_cpu_user_seconds_total')?.type).toBe('counter');
    expect(families.has('kici_orch_nodejs_eventloop_lag_seconds')).toBe(true);
  });
});
