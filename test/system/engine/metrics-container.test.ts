/**
 * Every documented scaler metric name shows in a live scrape after a burst on a real container
 * engine (KICI_TEST_ENGINE) and bare-metal agents side by side: a job in an agent container, a
 * warm pool and a job on bare-metal, and a label set whose spawns fail. Series carry each backend.
 * (The QEMU micro-VM runs in the other system namespace: test/system/metrics-backends.test.ts.)
 */
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { containerScaler, ENGINE, RecordingIsolation, removeScalerContainers } from '../../helpers/engine.js';
import {
  AGENT_BIN,
  eventually,
  startTestOrchestrator,
  type TestOrchestrator,
} from '../../helpers/orchestrator.js';
import { parsePromText, type MetricFamily } from '../../helpers/prom-text.js';
import { SPEC_METRICS } from '../../helpers/spec-metrics.js';

const NAME = `mx-${ENGINE}`;
let t: TestOrchestrator;
let dir: string;
let families: Map<string, MetricFamily>;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kici-metrics-engine-'));
  // Bare-metal agents run confined under their own uids, which must be able to run the binary.
  await chmod(dir, 0o755);
  const broken = join(dir, 'kici-agent');
  await writeFile(broken, '#!/bin/sh\necho "cannot start" >&2\nexit 3\n');
  await chmod(broken, 0o755);
  t = await startTestOrchestrator({
    host: '0.0.0.0',
    isolation: new RecordingIsolation(),
    config: {
      version: 1,
      globalMaxAgents: 8,
      scalers: [
        containerScaler(NAME),
        {
          name: 'bm',
          type: 'bare-metal',
          maxAgents: 4,
          warmPool: { enabled: true, size: 1, idleTimeoutSeconds: 600 },
          labelSets: [
            { labels: ['linux', 'warm'], binaryPath: AGENT_BIN, resources: { requests: { cpus: 0.5 } } },
            { labels: ['linux', 'small'], binaryPath: AGENT_BIN },
            { labels: ['linux', 'broken'], binaryPath: broken },
          ],
        },
      ],
    },
  });
  const scaler = t.orch.scaler!;
  await eventually(
    () => scaler.warm.specs().every((s) => scaler.warm.ready(s).length === 1),
    30_000,
    'warm agent ready',
  );
  const run = await t.api<{ jobs: { id: string; name: string }[] }>('POST', '/api/v1/runs', {
    jobs: {
      metal: { runsOn: ['linux', 'small'], steps: [{ run: 'true' }] },
      box: { runsOn: [NAME], steps: [{ run: 'echo in-container' }] },
      broken: { runsOn: ['linux', 'broken'], steps: [{ run: 'true' }] },
    },
  });
  const byName = new Map(run.body.jobs.map((j) => [j.name, j.id]));
  for (const name of ['metal', 'box']) {
    const job = await t.waitForJob(byName.get(name)!, undefined, 120_000);
    expect(job.state, `${name}: ${job.reason}`).toBe('succeeded');
  }
  await eventually(
    async () =>
      (await t.api<{ lastProvisioningError: string | null }>('GET', `/api/v1/jobs/${byName.get('broken')}`))
        .body.lastProvisioningError,
    20_000,
    'spawn failure recorded',
  );
  const text = await (
    await fetch(`${t.orch.url}/metrics`, { headers: { authorization: `Bearer ${t.orch.adminToken}` } })
  ).text();
  families = parsePromText(text);
}, 300_000);

afterAll(async () => {
  await t?.stop();
  await removeScalerContainers(NAME);
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe(`documented metric names after a burst on bare-metal and ${ENGINE} containers`, () => {
  it.each(Object.entries(SPEC_METRICS))('%s is exposed with its labels', (name, labels) => {
    const f = families.get(name);
    expect(f, `${name} missing from the scrape`).toBeDefined();
    for (const s of f!.samples) for (const l of labels) expect(Object.keys(s.labels)).toContain(l);
  });

  it('has series for both backends', () => {
    const backends = (name: string) => new Set(families.get(name)!.samples.map((s) => s.labels.backend));
    for (const name of ['kici_orch_scaler_cpus_used', 'kici_orch_scaler_cap_max'])
      expect([...backends(name)].sort(), name).toEqual(['bare-metal', 'container']);
    for (const name of ['kici_orch_spawn_latency_seconds', 'kici_orch_job_duration_seconds']) {
      const seen = new Set(
        families
          .get(name)!
          .samples.filter((s) => s.name.endsWith('_count') && s.value > 0)
          .map((s) => s.labels.backend),
      );
      expect(seen.has('bare-metal') && seen.has('container'), `${name}: ${[...seen].join(',')}`).toBe(true);
    }
  });
});
