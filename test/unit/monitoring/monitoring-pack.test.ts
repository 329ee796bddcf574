/**
 * The shipped alert rules and Grafana dashboard read only metrics the orchestrator exports: every
 * name in every rule expression and panel query is one of the registry's families (or a
 * histogram's `_bucket`, `_sum`, `_count` series) of a real orchestrator with a scaler.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import {
  bareMetalConfig,
  ROOT,
  startTestOrchestrator,
  type TestOrchestrator,
} from '../../helpers/orchestrator.js';
import { promqlMetricNames } from '../../helpers/promql-names.js';

const RULES = join(ROOT, 'examples/monitoring/kici-alerts.yml');
const DASHBOARD = join(ROOT, 'examples/monitoring/grafana-dashboard.json');

interface Rule {
  alert: string;
  expr: string;
  for?: string;
}

let t: TestOrchestrator;
let exported: Set<string>;
let rules: Rule[];
let queries: { panel: string; expr: string }[];

beforeAll(async () => {
  t = await startTestOrchestrator({ config: bareMetalConfig() });
  exported = new Set();
  for (const m of await t.orch.metrics.registry.getMetricsAsJSON()) {
    exported.add(m.name);
    if (String(m.type) === 'histogram')
      for (const s of ['_bucket', '_sum', '_count']) exported.add(m.name + s);
  }
  const file = parse(await readFile(RULES, 'utf8')) as { groups: { rules: Rule[] }[] };
  rules = file.groups.flatMap((g) => g.rules);
  const dash = JSON.parse(await readFile(DASHBOARD, 'utf8')) as {
    panels: { title: string; targets: { expr: string }[] }[];
  };
  queries = dash.panels.flatMap((p) => p.targets.map((q) => ({ panel: p.title, expr: q.expr })));
});

afterAll(async () => {
  await t?.stop();
});

/** Names an expression reads that the orchestrator does not export. */
const unknown = (expr: string) => promqlMetricNames(expr).filter((n) => !exported.has(n));

describe('the monitoring pack in examples/monitoring', () => {
  it('has the documented alerts, plus spawn failures, queue wait and stuck jobs', () => {
    expect(rules.map((r) => r.alert)).toEqual(
      expect.arrayContaining([
        'ScalerCapCheckUnreachable',
        'ExternalProvisioningFailing',
        'ScalerReapBlocked',
        'ScalerProvisionsStuckUnseen',
        'KiCIScalerConfigReloadFailed',
        'KiCIScalerSpawnFailing',
        'KiCIJobQueueWaitHigh',
        'KiCIJobsStuckQueued',
        'KiCIJobsStuckRunning',
      ]),
    );
  });

  it('every rule expression reads only exported metrics', () => {
    for (const r of rules) {
      expect(promqlMetricNames(r.expr), r.alert).not.toEqual([]);
      expect(unknown(r.expr), `${r.alert}: ${r.expr}`).toEqual([]);
    }
  });

  it('every dashboard panel query reads only exported metrics', () => {
    expect(queries.length).toBeGreaterThan(10);
    for (const q of queries) {
      expect(promqlMetricNames(q.expr), q.panel).not.toEqual([]);
      expect(unknown(q.expr), `${q.panel}: ${q.expr}`).toEqual([]);
    }
  });

  it('the check can fail: a misspelt or unprefixed name is caught, labels and functions are not names', () => {
    expect(
      unknown('sum by (scaler) (rate(kici_orch_scaler_spawn_failure_total{bound="true"}[5m])) > 2'),
    ).toEqual(['kici_orch_scaler_spawn_failure_total']);
    expect(unknown('process_cpu_seconds_total')).toEqual(['process_cpu_seconds_total']);
    expect(
      promqlMetricNames(
        'histogram_quantile(0.9, sum by (le, backend) (rate(a_bucket{x=~"b|c"}[$__rate_interval]))) > 1 unless on (instance) b_total',
      ).sort(),
    ).toEqual(['a_bucket', 'b_total']);
  });
});
