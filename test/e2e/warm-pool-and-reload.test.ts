import { readFile, rm, writeFile } from 'node:fs/promises';
import { stringify } from 'yaml';
import { afterEach, describe, expect, it } from 'vitest';
import { freshDataDir } from '../helpers/data-dir.js';
import {
  ADMIN_BIN,
  AGENT_BIN,
  bareMetalConfig,
  eventually,
  scalerIdle,
  ORCH_BIN,
  runNode,
  startTestOrchestrator,
  writeConfig,
  type TestOrchestrator,
} from '../helpers/orchestrator.js';

let t: TestOrchestrator | undefined;
afterEach(async () => {
  await t?.stop();
  t = undefined;
});

const warmConfig = (size: number, maxAgents = 4) =>
  bareMetalConfig({ maxAgents, warmPool: { enabled: true, size, idleTimeoutSeconds: 1 } }, [
    // A warm agent needs a declared size, or the pool skips the label set.
    { labels: ['linux', 'warm'], binaryPath: AGENT_BIN, resources: { requests: { cpus: 0.5 } } },
  ]);

describe('warm pools with real agents', () => {
  it('keeps the pool filled, starts a job on a warm agent without a spawn, and replenishes', async () => {
    t = await startTestOrchestrator({ config: warmConfig(2) });
    const scaler = t.orch.scaler!;
    const ready = () => scaler.warm.ready(scaler.warm.specs()[0]!);
    await eventually(() => ready().length === 2, 20_000, 'two warm agents ready');
    const warmIds = new Set(ready().map((a) => a.agentId));
    const before = scaler.entries().length;
    const run = await t.api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
      jobs: { a: { runsOn: ['linux', 'warm'], steps: [{ run: 'echo warm-hit' }] } },
    });
    const job = await t.waitForJob(run.body.jobs[0]!.id);
    expect(job.state).toBe('succeeded');
    // A warm hit: the job ran on one of the agents that were already waiting.
    expect(warmIds.has(job.agentId!)).toBe(true);
    expect(before).toBe(2);
    // The pool refills to its size with a fresh agent.
    await eventually(
      () => ready().length === 2 && ready().some((a) => !warmIds.has(a.agentId)),
      20_000,
      'pool replenished',
    );
    // Warm agents hold reservations: they count against the caps. The used agent's own is
    // released once its teardown ends, which may come just after the refill.
    await eventually(() => scaler.capBook().count('bm') === 2, 20_000, 'only the warm agents reserved');
    expect(ready()).toHaveLength(2);
  });

  it('shrinking the pool by reload reaps idle warm agents at once', async () => {
    t = await startTestOrchestrator({ config: warmConfig(2) });
    const scaler = t.orch.scaler!;
    await eventually(() => scaler.warm.ready(scaler.warm.specs()[0]!).length === 2, 20_000, 'pool filled');
    await writeFile(t.orch.opts.scalerConfigPath!, stringify(warmConfig(0)));
    const res = await t.api<{ result: string; plan: { updated: string[] } }>('POST', '/api/v1/scaler/reload');
    expect(res.body.result).toBe('applied');
    expect(res.body.plan.updated).toEqual(['bm']);
    await eventually(() => scalerIdle(scaler), 15_000, 'warm agents reaped');
  });
});

describe('scheduled warm pools', () => {
  it('scaler status shows the scheduled target and the next size with its time, in text and JSON', async () => {
    // Two entries that alternate every minute: whatever the time, one has fired, and the other is
    // next within a minute. Both sizes are 0, so nothing is spawned.
    const config = bareMetalConfig(
      {
        maxAgents: 2,
        warmPool: {
          enabled: true,
          size: 1,
          idleTimeoutSeconds: 60,
          schedule: [
            { cron: '*/2 * * * *', size: 0, timezone: 'Europe/Berlin' },
            { cron: '1-59/2 * * * *', size: 0 },
          ],
        },
      },
      [{ labels: ['linux', 'warm'], binaryPath: AGENT_BIN, resources: { requests: { cpus: 0.5 } } }],
    );
    t = await startTestOrchestrator({ config });
    const before = Date.now();
    type Pool = { target: number; next: { at: string; size: number } | null };
    const res = await t.api<{ scalers: { warmPool: { pools: Pool[] } }[] }>('GET', '/api/v1/scaler/status');
    const [pool] = res.body.scalers[0]!.warmPool.pools;
    // The configured size is 1; the schedule's 0 is what the pool aims for.
    expect(pool!.target).toBe(0);
    const nextAt = Date.parse(pool!.next!.at);
    expect(nextAt).toBeGreaterThan(before - 1000);
    expect(nextAt - before).toBeLessThanOrEqual(61_000);
    expect(new Date(nextAt).getUTCSeconds()).toBe(0);
    const text = await runNode([ADMIN_BIN, 'scaler', 'status'], {
      KICI_SERVER_URL: t.orch.url,
      KICI_ADMIN_TOKEN: t.orch.adminToken,
    }).exited;
    expect(text.code).toBe(0);
    expect(text.stdout).toMatch(/\[[^\]]*warm[^\]]*\] 0\/0, 0 at \d{4}-\d\d-\d\dT\d\d:\d\d:00\.000Z/);
    expect(t.orch.scaler!.entries()).toHaveLength(0);
  });
});

describe('scaler reload', () => {
  it('takes single and a timeout, and answers 400 naming the field for a bad one', async () => {
    t = await startTestOrchestrator({ config: bareMetalConfig({ maxAgents: 1 }) });
    const single = await t.api<{ result: string }>('POST', '/api/v1/scaler/reload?single=true&timeout=5');
    expect(single.status).toBe(200);
    expect(single.body.result).toBe('applied');
    for (const [q, field] of [
      ['timeout=0', 'timeout'],
      ['timeout=soon', 'timeout'],
      ['single=maybe', 'single'],
    ] as const) {
      const bad = await t.api<{ problems: string[] }>('POST', `/api/v1/scaler/reload?${q}`);
      expect(bad.status, q).toBe(400);
      expect(bad.body.problems[0]).toMatch(new RegExp(`^${field}: `));
    }
  });

  it('applies a valid change all at once and refuses an invalid file without changing anything', async () => {
    t = await startTestOrchestrator({ config: bareMetalConfig({ maxAgents: 1 }) });
    const path = t.orch.opts.scalerConfigPath!;
    const original = await readFile(path, 'utf8');
    await writeFile(path, 'version: 1\nscalers:\n  - name: bm\n    type: bare-metal\n    maxAgents: nope\n');
    const bad = await t.api<{ result: string; problems: string[] }>('POST', '/api/v1/scaler/reload');
    expect(bad.body.result).toBe('rejected');
    expect(bad.body.problems.join('\n')).toMatch(/scalers\[0\]\.maxAgents/);
    expect(t.orch.scaler!.config.scalers[0]!.maxAgents).toBe(1);

    await writeFile(
      path,
      stringify(
        bareMetalConfig({ type: 'event', provisioningTargets: ['job:x.yaml'] }, [
          { labels: ['linux', 'small'] },
        ]),
      ),
    );
    const typeChange = await t.api<{ result: string; problems: string[] }>('POST', '/api/v1/scaler/reload');
    expect(typeChange.body.result).toBe('rejected');
    expect(typeChange.body.problems.join('\n')).toMatch(
      /backend type cannot change from bare-metal to event/,
    );

    const next = bareMetalConfig({ maxAgents: 3 }, [
      { labels: ['linux', 'small'], binaryPath: AGENT_BIN },
      { labels: ['linux', 'medium'], binaryPath: AGENT_BIN },
    ]);
    next.scalers.push({
      name: 'extra',
      type: 'bare-metal',
      maxAgents: 1,
      labelSets: [{ labels: ['linux', 'extra'], binaryPath: AGENT_BIN }],
    } as never);
    await writeFile(path, stringify(next));
    const ok = await t.api<{ result: string; plan: { added: string[]; updated: string[] } }>(
      'POST',
      '/api/v1/scaler/reload',
    );
    expect(ok.body).toMatchObject({ result: 'applied', plan: { added: ['extra'], updated: ['bm'] } });
    const run = await t.api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
      jobs: {
        m: { runsOn: ['linux', 'medium'], steps: [{ run: 'true' }] },
        x: { runsOn: ['extra'], steps: [{ run: 'true' }] },
      },
    });
    const states = await Promise.all(run.body.jobs.map((j) => t!.waitForJob(j.id)));
    expect(states.map((j) => j.state)).toEqual(['succeeded', 'succeeded']);
    const metrics = await (
      await fetch(`${t.orch.url}/metrics`, { headers: { authorization: `Bearer ${t.orch.adminToken}` } })
    ).text();
    expect(metrics).toMatch(/kici_orch_scaler_config_reloads_total\{result="success"\} 1/);
    expect(metrics).toMatch(/kici_orch_scaler_config_reloads_total\{result="failed"\} 2/);
    await writeFile(path, original);
  });

  it('SIGHUP reloads a running serve process', async () => {
    const dataDir = await freshDataDir();
    const config = await writeConfig(bareMetalConfig());
    const serve = runNode(
      [ORCH_BIN, 'serve', '--config', config, '--listen', '127.0.0.1:0', '--data-dir', dataDir],
      { KICI_LOG_LEVEL: 'info' },
    );
    try {
      const url = (
        await eventually(() => /"url":"(http:[^"]+)"/.exec(serve.output().stdout), 30_000, 'ready')
      )[1]!;
      const next = bareMetalConfig();
      next.scalers.push({
        name: 'added-by-hup',
        type: 'bare-metal',
        maxAgents: 1,
        labelSets: [{ labels: ['hup'], binaryPath: AGENT_BIN }],
      } as never);
      await writeFile(config, stringify(next));
      serve.child.kill('SIGHUP');
      await eventually(
        async () => {
          const res = await runNode([ADMIN_BIN, 'scaler', 'status', '--json'], {
            KICI_SERVER_URL: url,
            KICI_DATA_DIR: dataDir,
          }).exited;
          return res.stdout.includes('added-by-hup');
        },
        15_000,
        'new scaler visible after SIGHUP',
      );
    } finally {
      serve.child.kill('SIGTERM');
      await serve.exited;
      await rm(dataDir, { recursive: true, force: true });
    }
  });
});
