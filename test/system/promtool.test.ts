/**
 * The /metrics exposition passes `promtool check metrics` (Prometheus's own linter: naming,
 * `_total` on counters, units, HELP text), after a small burst of real jobs so the histograms and
 * labelled counters have series. promtool comes from Debian's prometheus package, installed by
 * scripts/system/setup.sh; no Prometheus server runs.
 */
import { spawn } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bareMetalConfig, startTestOrchestrator, type TestOrchestrator } from '../helpers/orchestrator.js';

let t: TestOrchestrator;
let scrape: string;

beforeAll(async () => {
  t = await startTestOrchestrator({ config: bareMetalConfig() });
  const run = await t.api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
    jobs: {
      ok: { runsOn: ['linux', 'small'], steps: [{ run: 'true' }] },
      bad: { runsOn: ['linux', 'small'], steps: [{ run: 'exit 3' }] },
    },
  });
  await Promise.all(run.body.jobs.map((j) => t.waitForJob(j.id)));
  scrape = await (
    await fetch(`${t.orch.url}/metrics`, { headers: { authorization: `Bearer ${t.orch.adminToken}` } })
  ).text();
}, 120_000);

afterAll(async () => {
  await t?.stop();
});

function promtool(input: string): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn('promtool', ['check', 'metrics'], { stdio: ['pipe', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (d) => (out += String(d)));
    child.stderr.on('data', (d) => (out += String(d)));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, out }));
    child.stdin.end(input);
  });
}

describe('promtool check metrics', () => {
  it('finds no problem in a scrape taken after a burst of jobs', async () => {
    expect(scrape).toContain('kici_orch_job_duration_seconds_bucket');
    const r = await promtool(scrape);
    expect(r.out).toBe('');
    expect(r.code).toBe(0);
  });

  it('is a real check: it flags a counter without _total', async () => {
    const r = await promtool('# HELP bad_counter x\n# TYPE bad_counter counter\nbad_counter 1\n');
    expect(r.code).not.toBe(0);
    expect(r.out).toMatch(/_total/);
  });
});
