import { writeFile } from 'node:fs/promises';
import { stringify } from 'yaml';
import { afterEach, describe, expect, it } from 'vitest';
import {
  ADMIN_BIN,
  AGENT_BIN,
  bareMetalConfig,
  eventually,
  runNode,
  startTestOrchestrator,
  type TestOrchestrator,
} from '../helpers/orchestrator.js';

/**
 * Backoff outlives no fix: a reload that changes a scaler lifts its backoff, and an operator can lift
 * one on demand. The first backoff holds a label set 30 s; each test is done well before that.
 */

let t: TestOrchestrator | undefined;
afterEach(async () => {
  await t?.stop();
  t = undefined;
});

const broken = () => bareMetalConfig({}, [{ labels: ['linux', 'small'], binaryPath: '/bin/false' }]);
const fixed = () => bareMetalConfig({}, [{ labels: ['linux', 'small'], binaryPath: AGENT_BIN }]);

interface Status {
  scalers: {
    name: string;
    backoff: { labelSet: string; consecutiveFailures: number }[];
    backoffLifted: { labelSet: string; by: string; at: string; consecutiveFailures: number }[];
  }[];
}

async function lifts(): Promise<[string, string][]> {
  const { body } = await t!.api<Status>('GET', '/api/v1/scaler/status');
  return body.scalers.flatMap((s) => s.backoffLifted.map((l) => [l.labelSet, l.by] as [string, string]));
}

async function backingOff(): Promise<string[]> {
  const { body } = await t!.api<Status>('GET', '/api/v1/scaler/status');
  return body.scalers.flatMap((s) => s.backoff.map((b) => b.labelSet));
}

async function submitAndWaitForBackoff(): Promise<string> {
  const { body } = await t!.api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
    jobs: { a: { runsOn: ['linux', 'small'], steps: [{ run: 'echo ok' }] } },
  });
  await eventually(async () => (await backingOff()).length > 0, 20_000, 'the label set backing off');
  return body.jobs[0]!.id;
}

describe('provisioning backoff', () => {
  it('a reload that fixes the scaler lifts its backoff: the job runs at once', async () => {
    t = await startTestOrchestrator({ config: broken() });
    const id = await submitAndWaitForBackoff();
    await writeFile(t.orch.opts.scalerConfigPath!, stringify(fixed()));
    const res = await t.api<{ result: string }>('POST', '/api/v1/scaler/reload');
    expect(res.body.result).toBe('applied');
    expect(await backingOff()).toEqual([]);
    expect(await lifts()).toEqual([['linux,small', 'reload']]);
    const done = await t.waitForJob(id, undefined, 20_000);
    expect(done.state).toBe('succeeded');
  });

  it('kici-admin scaler reset-backoff lifts it on demand; an unknown scaler exits 1', async () => {
    t = await startTestOrchestrator({ config: broken() });
    await submitAndWaitForBackoff();
    const env = { KICI_URL: t.orch.url, KICI_ADMIN_TOKEN: t.orch.adminToken };
    const r = await runNode(
      [ADMIN_BIN, 'scaler', 'reset-backoff', 'bm', '--label-set', 'linux,small', '--json'],
      env,
    ).exited;
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout)).toEqual({ scaler: 'bm', cleared: ['linux,small'] });
    expect(await lifts()).toEqual([['linux,small', 'operator']]);
    const text = await runNode([ADMIN_BIN, 'scaler', 'status'], env).exited;
    expect(text.stdout).toMatch(
      /^bm: backoff of \[linux,small\] lifted by an operator \(token "[^"]+", via instance \S+\) at \S+ \(after \d+ failure\(s\)\)$/m,
    );
    const missing = await runNode([ADMIN_BIN, 'scaler', 'reset-backoff', 'nope'], env).exited;
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/no scaler named "nope"/);
  });
});
