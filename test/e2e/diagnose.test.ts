/**
 * `kici-admin diagnose` against a real orchestrator whose bare-metal scaler points at an agent
 * binary that does not exist: the job waits with the classified reason, and the real CLI names
 * the failure kind, the backoff, the missing tool and the fix, as text and as JSON. The same
 * failed spawn is counted in /metrics under the backend's type.
 */
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import {
  ADMIN_BIN,
  bareMetalConfig,
  eventually,
  runNode,
  startTestOrchestrator,
  type TestOrchestrator,
} from '../helpers/orchestrator.js';
import { vanishingBinary } from '../helpers/vanishing-binary.js';

let t: TestOrchestrator | undefined;
afterEach(async () => {
  await t?.stop();
  t = undefined;
});

function admin(args: string[]) {
  return runNode([ADMIN_BIN, ...args], { KICI_SERVER_URL: t!.orch.url, KICI_ADMIN_TOKEN: t!.orch.adminToken })
    .exited;
}

describe('kici-admin diagnose', () => {
  it('names the failure kind, the backoff, the missing agent binary and the fix; exits 1', async () => {
    const bin = await vanishingBinary(join(tmpdir(), `kici-diagnose-no-such-agent-${process.pid}`));
    const missing = bin.path;
    t = await startTestOrchestrator({
      config: bareMetalConfig({}, [{ labels: ['linux'], binaryPath: missing }]),
      sweepIntervalMs: 200,
    });
    await bin.vanish();
    const configPath = t.orch.opts.scalerConfigPath!;
    const run = await t.api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
      jobs: { a: { runsOn: ['linux'], steps: [{ run: 'true' }] } },
    });
    const id = run.body.jobs[0]!.id;
    const job = await eventually(
      async () => {
        const j = (await t!.api<{ state: string; waiting: string | null }>('GET', `/api/v1/jobs/${id}`)).body;
        return j.waiting?.includes('binary-missing') ? j : undefined;
      },
      10_000,
      'the classified reason on the waiting job',
    );
    expect(job.state).toBe('queued');

    const text = await admin(['diagnose']);
    expect(text.code).toBe(1);
    expect(text.stdout).toContain('scaler:bm (bare-metal): PROBLEM');
    expect(text.stdout).toMatch(
      /spawn failures: binary-missing x\d+, last at \S+: agent binary .* does not exist/,
    );
    expect(text.stdout).toMatch(/backoff: \[linux\] \d+ consecutive failure\(s\); lifts at \d{4}-/);
    expect(text.stdout).toContain(
      `missing tool: agent binary of label set [linux]: ${missing} does not exist (start-up fails)`,
    );
    expect(text.stdout).toContain(
      `fix: install kici-agent at ${missing} (chmod +x), or point binaryPath at it`,
    );
    expect(text.stdout).toMatch(/caps: 0\/4 agents/);
    // The spawn failure's fix names the config file the operator has to edit.
    expect(text.stdout).toContain(`or fix binaryPath in ${configPath}`);

    const json = await admin(['diagnose', '--json']);
    expect(json.code).toBe(1);
    const d = JSON.parse(json.stdout) as {
      healthy: boolean;
      scalers: {
        name: string;
        failures: { kind: string; count: number }[];
        backoff: { active: boolean; liftsAt: string | null; lastError: { kind: string } }[];
        missingTools: { tool: string; problem: string; severity: string; fix: string }[];
        findings: { problem: string; fix: string }[];
        caps: { active: number; maxAgents: number };
      }[];
    };
    expect(d.healthy).toBe(false);
    const s = d.scalers[0]!;
    expect(s.name).toBe('bm');
    expect(s.failures[0]).toMatchObject({ kind: 'binary-missing' });
    expect(s.backoff[0]).toMatchObject({ active: true, lastError: { kind: 'binary-missing' } });
    expect(Date.parse(s.backoff[0]!.liftsAt!)).toBeGreaterThan(Date.now());
    expect(s.missingTools).toEqual([
      {
        tool: 'agent binary of label set [linux]',
        problem: `${missing} does not exist`,
        severity: 'fatal',
        fix: `install kici-agent at ${missing} (chmod +x), or point binaryPath at it`,
      },
    ]);
    expect(s.caps).toMatchObject({ active: 0, maxAgents: 4 });
  });

  it('counts the failed spawn in /metrics under the backend type', async () => {
    const bin = await vanishingBinary(join(tmpdir(), `kici-metrics-no-agent-${process.pid}`));
    t = await startTestOrchestrator({
      config: bareMetalConfig({}, [{ labels: ['linux'], binaryPath: bin.path }]),
    });
    await bin.vanish();
    await t.api('POST', '/api/v1/runs', { jobs: { a: { runsOn: ['linux'], steps: [{ run: 'true' }] } } });
    const metrics = await eventually(
      async () => {
        const m = await fetch(`${t!.orch.url}/metrics`, {
          headers: { authorization: `Bearer ${t!.orch.adminToken}` },
        }).then((r) => r.text());
        return m.includes('kici_orch_scaler_spawn_failures_total{') ? m : undefined;
      },
      10_000,
      'a spawn failure in /metrics',
    );
    expect(metrics).toMatch(
      /kici_orch_scaler_spawn_failures_total\{scaler="bm",backend="bare-metal",bound="true",kind="binary-missing"\} [1-9]/,
    );
    expect(metrics).not.toMatch(/spawn_failures_total\{backend="scaler"/);
  });

  it('exits 0 and says healthy when nothing is wrong', async () => {
    t = await startTestOrchestrator({ config: bareMetalConfig() });
    const out = await admin(['diagnose']);
    expect(out.stdout).toContain('scaler:bm (bare-metal): ok');
    expect(out.stdout).toContain('healthy');
    expect(out.code).toBe(0);
  });
});
