/**
 * Every documented scaler metric name shows in a live scrape after a burst that touches both
 * backends this suite's namespace can run side by side: bare-metal agents (a warm pool, jobs, and a
 * label set whose spawns fail) and a QEMU micro-VM (a job in a VM). Series carry each backend.
 * Containers run in the engine suite's own namespace: test/system/engine/metrics-container.test.ts.
 */
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  AGENT_BIN,
  eventually,
  startTestOrchestrator,
  type TestOrchestrator,
} from '../helpers/orchestrator.js';
import { parsePromText, type MetricFamily } from '../helpers/prom-text.js';
import { SPEC_METRICS } from '../helpers/spec-metrics.js';
import { deleteLink, qemuPidsUnder, vmConfig } from '../helpers/vm.js';

const exec = promisify(execFile);
/** Names of this file's own: other system files use other bridges, subnets and tables. */
const BRIDGE = 'vmm-br0';
const TABLE = 'vmm-t';

let t: TestOrchestrator;
let base: string;
let dir: string;
let families: Map<string, MetricFamily>;

beforeAll(async () => {
  base = await mkdtemp(join(tmpdir(), 'kici-vmm-'));
  dir = await mkdtemp(join(tmpdir(), 'kici-metrics-burst-'));
  // Bare-metal agents run confined under their own uids, which must be able to run the binary.
  await chmod(dir, 0o755);
  const broken = join(dir, 'kici-agent');
  await writeFile(broken, '#!/bin/sh\necho "cannot start" >&2\nexit 3\n');
  await chmod(broken, 0o755);
  const config = vmConfig({ name: 'vmm', bridge: BRIDGE, subnet: '10.231.11', base, table: TABLE });
  config.globalMaxAgents = 8;
  (config.scalers as unknown[]).push({
    name: 'bm',
    type: 'bare-metal',
    maxAgents: 4,
    warmPool: { enabled: true, size: 1, idleTimeoutSeconds: 600 },
    labelSets: [
      { labels: ['linux', 'warm'], binaryPath: AGENT_BIN, resources: { requests: { cpus: 0.5 } } },
      { labels: ['linux', 'small'], binaryPath: AGENT_BIN },
      { labels: ['linux', 'broken'], binaryPath: broken },
    ],
  });
  t = await startTestOrchestrator({ host: '0.0.0.0', config });
  const scaler = t.orch.scaler!;
  await eventually(
    () => scaler.warm.specs().every((s) => scaler.warm.ready(s).length === 1),
    30_000,
    'warm agent ready',
  );
  const run = await t.api<{ jobs: { id: string; name: string }[] }>('POST', '/api/v1/runs', {
    jobs: {
      metal: { runsOn: ['linux', 'small'], steps: [{ run: 'true' }] },
      vm: { runsOn: ['linux', 'vmm'], steps: [{ run: 'echo in-vm' }] },
      broken: { runsOn: ['linux', 'broken'], steps: [{ run: 'true' }] },
    },
  });
  const byName = new Map(run.body.jobs.map((j) => [j.name, j.id]));
  for (const name of ['metal', 'vm']) {
    const job = await t.waitForJob(byName.get(name)!, undefined, 180_000);
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
  if (base) await eventually(async () => (await qemuPidsUnder(base)).length === 0, 20_000, 'qemu gone');
  await deleteLink(BRIDGE);
  await exec('nft', ['delete', 'table', 'inet', TABLE]).catch(() => {});
  for (const d of [base, dir]) if (d) await rm(d, { recursive: true, force: true });
});

describe('documented metric names after a burst on bare-metal and a QEMU VM', () => {
  it.each(Object.entries(SPEC_METRICS))('%s is exposed with its labels', (name, labels) => {
    const f = families.get(name);
    expect(f, `${name} missing from the scrape`).toBeDefined();
    for (const s of f!.samples) for (const l of labels) expect(Object.keys(s.labels)).toContain(l);
  });

  it('has series for both backends', () => {
    const backends = (name: string) => new Set(families.get(name)!.samples.map((s) => s.labels.backend));
    for (const name of ['kici_orch_scaler_cpus_used', 'kici_orch_scaler_cap_max'])
      expect([...backends(name)].sort(), name).toEqual(['bare-metal', 'firecracker']);
    // Both spawned an agent that registered and ran a job.
    for (const name of ['kici_orch_spawn_latency_seconds', 'kici_orch_job_duration_seconds']) {
      const seen = new Set(
        families
          .get(name)!
          .samples.filter((s) => s.name.endsWith('_count') && s.value > 0)
          .map((s) => s.labels.backend),
      );
      expect(seen.has('bare-metal') && seen.has('firecracker'), `${name}: ${[...seen].join(',')}`).toBe(true);
    }
  });
});
