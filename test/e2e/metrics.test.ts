/**
 * Metrics people build dashboards and alerts from: after a small burst of jobs on real bare-metal
 * agents, /metrics parses as strict Prometheus text, carries the queue-wait, duration and
 * spawn-latency histograms with sane buckets and counts equal to the burst, counts finished jobs by
 * result, names the build, and never mixes a `__global__` label value into per-scaler series.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  bareMetalConfig,
  ROOT,
  startTestOrchestrator,
  type TestOrchestrator,
} from '../helpers/orchestrator.js';
import { histogramSeries, parsePromText, type MetricFamily } from '../helpers/prom-text.js';

const BURST = 4;
let t: TestOrchestrator;
let families: Map<string, MetricFamily>;
let text: string;

beforeAll(async () => {
  t = await startTestOrchestrator({ config: bareMetalConfig() });
  const jobs = Object.fromEntries(
    Array.from({ length: BURST }, (_, i) => [
      `j${i}`,
      { runsOn: ['linux', 'small'], steps: [{ run: 'echo hi' }] },
    ]),
  );
  const run = await t.api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', { jobs });
  const done = await Promise.all(run.body.jobs.map((j) => t.waitForJob(j.id)));
  expect(done.map((j) => j.state)).toEqual(Array(BURST).fill('succeeded'));
  const res = await fetch(`${t.orch.url}/metrics`, {
    headers: { authorization: `Bearer ${t.orch.adminToken}` },
  });
  expect(res.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
  text = await res.text();
  families = parsePromText(text);
}, 120_000);

afterAll(async () => {
  await t?.stop();
});

function family(name: string): MetricFamily {
  const f = families.get(name);
  if (!f) throw new Error(`${name} is not exposed`);
  return f;
}

describe('/metrics after a burst of jobs', () => {
  it.each([
    'kici_orch_job_queue_wait_seconds',
    'kici_orch_job_duration_seconds',
    'kici_orch_spawn_latency_seconds',
  ])('%s is a histogram with sane buckets, labelled by scaler and backend, counting the burst', (name) => {
    const f = family(name);
    expect(f.type).toBe('histogram');
    const series = histogramSeries(f);
    expect(series.length).toBeGreaterThan(0);
    for (const s of series) {
      expect(s.labels).toMatchObject({ scaler: 'bm', backend: 'bare-metal' });
      // 50 ms up to 10 min, then +Inf: fast warm hits and slow pulls both land in a real bucket.
      expect(s.les[0]).toBeLessThanOrEqual(0.1);
      expect(s.les.at(-2)).toBeGreaterThanOrEqual(300);
      expect(s.les.at(-1)).toBe(Infinity);
    }
    expect(series.reduce((n, s) => n + s.count, 0)).toBe(BURST);
  });

  it('counts finished jobs by result', () => {
    const f = family('kici_orch_jobs_finished_total');
    expect(f.type).toBe('counter');
    expect(f.samples).toEqual([
      { name: 'kici_orch_jobs_finished_total', labels: { result: 'succeeded' }, value: BURST },
    ]);
    const duration = histogramSeries(family('kici_orch_job_duration_seconds'));
    expect(duration.map((s) => s.labels.result)).toEqual(['succeeded']);
  });

  it('names the build', async () => {
    const pkg = JSON.parse(await readFile(join(ROOT, 'package.json'), 'utf8')) as { version: string };
    const f = family('kici_orch_build_info');
    expect(f.type).toBe('gauge');
    expect(f.samples).toEqual([{ name: 'kici_orch_build_info', labels: { version: pkg.version }, value: 1 }]);
  });

  it('keeps global figures in their own metrics: no __global__ label value anywhere', () => {
    expect(text).not.toContain('__global__');
    for (const f of families.values())
      for (const s of f.samples) expect(Object.values(s.labels)).not.toContain('__global__');
    expect(family('kici_orch_agents_global').type).toBe('gauge');
    expect(family('kici_orch_global_cpus_used').type).toBe('gauge');
    expect(family('kici_orch_scaler_cpus_used').samples.map((s) => s.labels)).toEqual([
      { scaler: 'bm', backend: 'bare-metal', scaler_type: 'bare-metal', machine_pool: '' },
    ]);
  });

  it('names every counter with _total, and documents every kici_orch_ metric in docs/metrics.md', async () => {
    const doc = await readFile(join(ROOT, 'docs/metrics.md'), 'utf8');
    for (const f of families.values()) {
      if (f.type === 'counter') expect(f.name).toMatch(/_total$/);
      if (f.name.startsWith('kici_orch_') && !/^kici_orch_(process|nodejs)_/.test(f.name))
        expect(doc, `${f.name} missing from docs/metrics.md`).toContain(`\`${f.name}\``);
    }
  });
});
