/**
 * A real Prometheus (Debian's package, on loopback) scrapes a real orchestrator with a viewer
 * token, as docs/metrics.md shows, with the shipped alert rules loaded. A bare-metal label set
 * whose agent binary is removed after start-up (start-up refuses a missing one) fails every spawn
 * for its waiting job; the spawn-failure alert must go to firing. Only the rules' `for:` holds are shortened (the file is otherwise loaded as
 * shipped), and the scrape and evaluation intervals are one second.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chmod, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../helpers/crash.js';
import {
  bareMetalConfig,
  ROOT,
  startTestOrchestrator,
  type TestOrchestrator,
} from '../helpers/orchestrator.js';

const PROMETHEUS = '/usr/bin/prometheus';
const SHIPPED_RULES = join(ROOT, 'examples/monitoring/kici-alerts.yml');

let t: TestOrchestrator;
let dir: string;
let prom: ChildProcess | undefined;
let promUrl: string;
let promLog = '';

/** Read `url` until `ok` says yes, or fail at the deadline with the last answer and Prometheus' log. */
async function pollJson<T>(url: string, ok: (body: T) => boolean, what: string, ms = 90_000): Promise<T> {
  const until = Date.now() + ms;
  let last: unknown;
  for (;;) {
    try {
      const res = await fetch(url);
      last = res.ok ? ((await res.json()) as T) : `HTTP ${res.status}`;
      if (res.ok && ok(last as T)) return last as T;
    } catch (err) {
      last = err;
    }
    if (Date.now() > until)
      throw new Error(
        `${what}: not after ${ms} ms; last answer ${JSON.stringify(last)}\n${promLog.slice(-3000)}`,
      );
    await new Promise((r) => setTimeout(r, 500));
  }
}

/** The shipped rules with every `for:` hold set to zero; nothing else may change. */
function withoutHolds(rules: string): string {
  return rules.replace(/^(\s*for:\s*)\S+\s*$/gm, '$10s');
}

beforeAll(async () => {
  if (!existsSync(PROMETHEUS))
    throw new Error(`${PROMETHEUS} not found: install Debian's prometheus package`);
  dir = await mkdtemp(join(tmpdir(), 'kici-prom-'));
  const agent = join(dir, 'removed-agent');
  await writeFile(agent, '#!/bin/sh\nexit 3\n');
  await chmod(agent, 0o755);
  const config = bareMetalConfig({}, [{ labels: ['linux', 'missing'], binaryPath: agent }]);
  t = await startTestOrchestrator({ config, provisionBackoff: { baseMs: 300, maxMs: 1000 } });
  await rm(agent);
  const made = await t.api<{ token: string }>('POST', '/api/v1/access/tokens', {
    name: 'prometheus',
    role: 'viewer',
  });
  expect(made.status).toBe(201);
  const tokenFile = join(dir, 'kici-token');
  await writeFile(tokenFile, made.body.token);
  await chmod(tokenFile, 0o400);

  const shipped = await readFile(SHIPPED_RULES, 'utf8');
  const rules = withoutHolds(shipped);
  // Only the `for:` lines differ from the shipped file.
  const changed = shipped.split('\n').filter((l, i) => l !== rules.split('\n')[i]);
  expect(changed.every((l) => /^\s*for:/.test(l))).toBe(true);
  expect(changed.length).toBeGreaterThan(0);
  await writeFile(join(dir, 'kici-alerts.yml'), rules);

  const target = new URL(t.orch.url).host;
  await writeFile(
    join(dir, 'prometheus.yml'),
    [
      'global:',
      '  scrape_interval: 1s',
      '  evaluation_interval: 1s',
      'rule_files:',
      `  - ${join(dir, 'kici-alerts.yml')}`,
      'scrape_configs:',
      '  - job_name: kici',
      '    authorization:',
      '      type: Bearer',
      `      credentials_file: ${tokenFile}`,
      '    static_configs:',
      `      - targets: ['${target}']`,
      '',
    ].join('\n'),
  );
  const port = await freePort();
  promUrl = `http://127.0.0.1:${port}`;
  prom = spawn(
    PROMETHEUS,
    [
      `--config.file=${join(dir, 'prometheus.yml')}`,
      `--storage.tsdb.path=${join(dir, 'data')}`,
      `--web.listen-address=127.0.0.1:${port}`,
      '--log.level=warn',
    ],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  prom.stdout!.on('data', (d) => (promLog += String(d)));
  prom.stderr!.on('data', (d) => (promLog += String(d)));
  await pollJson(`${promUrl}/api/v1/status/buildinfo`, () => true, 'Prometheus answering', 30_000);
}, 120_000);

afterAll(async () => {
  if (prom?.pid && prom.exitCode === null) {
    const exited = new Promise((r) => prom!.once('exit', r));
    prom.kill('SIGTERM');
    await exited;
  }
  await t?.stop();
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe('Prometheus with the shipped rules', () => {
  it('loads every shipped rule', async () => {
    const body = await pollJson<{ data: { groups: { rules: { name: string }[] }[] } }>(
      `${promUrl}/api/v1/rules`,
      (b) => b.data.groups.length > 0,
      'rules loaded',
    );
    const names = body.data.groups.flatMap((g) => g.rules.map((r) => r.name));
    expect(names).toContain('KiCIScalerSpawnFailing');
    expect(names).toContain('ScalerReapBlocked');
  });

  it('scrapes the orchestrator with the viewer token', async () => {
    await pollJson<{ data: { activeTargets: { health: string; lastError: string }[] } }>(
      `${promUrl}/api/v1/targets`,
      (b) => b.data.activeTargets.some((x) => x.health === 'up'),
      'target up',
    );
  });

  it('fires the spawn-failure alert while spawns of a waiting job keep failing', async () => {
    const run = await t.api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
      jobs: { build: { runsOn: ['linux', 'missing'], steps: [{ run: 'true' }] } },
    });
    type Alert = { labels: Record<string, string>; state: string };
    const body = await pollJson<{ data: { alerts: Alert[] } }>(
      `${promUrl}/api/v1/alerts`,
      (b) =>
        b.data.alerts.some((a) => a.labels.alertname === 'KiCIScalerSpawnFailing' && a.state === 'firing'),
      'KiCIScalerSpawnFailing firing',
    );
    const alert = body.data.alerts.find((a) => a.labels.alertname === 'KiCIScalerSpawnFailing')!;
    expect(alert.labels).toMatchObject({
      scaler: 'bm',
      backend: 'bare-metal',
      kind: 'binary-missing',
      severity: 'critical',
    });
    await t.api('POST', `/api/v1/jobs/${run.body.jobs[0]!.id}/cancel`);
  });
});
