import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { normalizeLabelSet, scalerFileSchema } from '../../src/config/index.js';
import { runSimulation, type SimReport } from '../../src/scaler/sim/report.js';
import { percentile, sortedCopy } from '../../src/scaler/sim/stats.js';
import { parseTraceFile } from '../../src/scaler/sim/trace.js';
import {
  ADMIN_BIN,
  AGENT_BIN,
  eventually,
  runNode,
  startTestOrchestrator,
  trustedHost,
  type TestOrchestrator,
} from '../helpers/orchestrator.js';

let t: TestOrchestrator | undefined;
afterEach(async () => {
  await t?.stop();
  t = undefined;
});

const JOBS = 100;

describe('what-if simulator fidelity (real orchestrator, bare-metal agents, then a replay)', () => {
  it('simulated queue-wait p50 and p95 per label set are within 20 % (or 100 ms) of the real ones', async () => {
    // Two scalers, each with its own cap and a warm agent: each label set queues on its own cap.
    const scalerOf = (name: string, maxAgents: number, cpus: number) => ({
      name,
      type: 'bare-metal',
      maxAgents,
      warmPool: { enabled: true, size: 1 },
      labelSets: [
        trustedHost({ labels: ['linux', name], binaryPath: AGENT_BIN, resources: { requests: { cpus } } }),
      ],
    });
    const config = {
      version: 1,
      globalMaxAgents: 10,
      scalers: [scalerOf('small', 4, 0.5), scalerOf('large', 2, 1)],
    };
    t = await startTestOrchestrator({ config });
    const scaler = t.orch.scaler!;
    // Both warm agents are up before the workload arrives, as the replay assumes.
    const ready = () => scaler.warm.specs().reduce((n, p) => n + scaler.warm.ready(p).length, 0);
    await eventually(
      () => ready() === 2,
      20_000,
      `warm pool filled (${JSON.stringify({ specs: scaler.warm.specs(), skipped: scaler.warm.skipped() })})`,
    ).catch(async (err: Error) => {
      const st = await t!.api('GET', '/api/v1/scaler/status');
      throw new Error(
        `${JSON.stringify(st.body)} ` +
          `${err.message}; agents: ${JSON.stringify(scaler.entries().map((e) => [e.labelSetKey, e.phase]))}`,
      );
    });
    const jobs: Record<string, unknown> = {};
    for (let i = 0; i < JOBS; i++) {
      jobs[`j${i}`] = {
        runsOn: ['linux', i % 3 === 0 ? 'large' : 'small'],
        steps: [{ run: `sleep ${[0.05, 0.1, 0.15, 0.2][i % 4]}` }],
      };
    }
    // The workload is awaited on the orchestrator's own events, not by reading every job again and
    // again: a hundred readers polling the API on the orchestrator's event loop slowed its first
    // minutes (while most jobs were still waiting) and were a load the replay cannot know about.
    const settled = new Map<string, string>();
    let allSettled = () => {};
    const finished = new Promise<void>((r) => (allSettled = r));
    const off = t.orch.events.on('job.settled', ({ jobId, state }) => {
      settled.set(jobId, state);
      if (settled.size === JOBS) allSettled();
    });
    const { status, body } = await t.api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', { jobs });
    expect(status).toBe(201);
    await finished.finally(off);
    for (const j of body.jobs) expect(settled.get(j.id), j.id).toBe('succeeded');

    const get = async (path: string) => {
      const res = await fetch(`${t!.orch.url}${path}`, {
        headers: { authorization: `Bearer ${t!.orch.adminToken}` },
      });
      expect(res.status, path).toBe(200);
      return res.text();
    };
    const text = await get('/api/v1/trace/jobs?since=1h');
    const { jobs: trace, samples: fromApi } = parseTraceFile(text);
    expect(trace).toHaveLength(JOBS);
    // The CLI writes the same trace; a window that is not a duration is refused, naming the field.
    const out = join(t.dataDir, 'jobs.jsonl');
    const env = { KICI_SERVER_URL: t.orch.url, KICI_ADMIN_TOKEN: t.orch.adminToken };
    const cli = await runNode([ADMIN_BIN, 'job', 'export-trace', '--since', '1h', '--out', out], env).exited;
    expect(cli.code, cli.stderr).toBe(0);
    const exported = parseTraceFile(await readFile(out, 'utf8'));
    expect(exported.jobs).toEqual(trace);
    // Exported later, it may hold releases of agents that were still going away at the first export.
    expect(exported.samples).toEqual(expect.arrayContaining(fromApi));
    const samples = exported.samples;
    const bad = await t.api<{ problems: string[] }>('GET', '/api/v1/trace/jobs?since=soon');
    expect(bad.status).toBe(400);
    expect(bad.body.problems[0]).toMatch(/^since: /);
    // The store recorded the provisions of both scalers, and the hand-over of every job.
    const count = (kind: string, scaler?: string) =>
      samples.filter((x) => x.kind === kind && (scaler === undefined || x.scaler === scaler)).length;
    for (const name of ['small', 'large']) expect(count('spawn', name), name).toBeGreaterThan(0);
    expect(count('dispatch')).toBe(JOBS);
    const mean = (kind: string) => {
      const xs = samples.filter((x) => x.kind === kind).map((x) => x.ms);
      return Math.round(xs.reduce((a, b) => a + b, 0) / Math.max(1, xs.length));
    };

    // The replay knows only the trace: its jobs and the latencies it carries; nothing measured here.
    const sim = runSimulation(scalerFileSchema.parse(config), exported.jobs, {
      spawnMs: {},
      samples,
    });
    // The dashboard's what-if replays the store's own records of the window the same way.
    const whatIf = await t.api<{ current: SimReport }>('POST', '/api/v1/scaler/simulate', {
      proposed: JSON.stringify(config),
      since: '1h',
    });
    expect(whatIf.status, JSON.stringify(whatIf.body)).toBe(200);
    // The CLI, fed the exported file alone, replays it exactly as the programmatic entry does.
    const configFile = join(t.dataDir, 'scalers.yaml');
    await writeFile(configFile, JSON.stringify(config));
    const offline = await runNode(
      [ADMIN_BIN, 'scaler', 'simulate', '--config', configFile, '--trace', out, '--json'],
      env,
    ).exited;
    expect(offline.code, offline.stderr).toBe(0);
    const cliPools = (JSON.parse(offline.stdout) as { proposed: SimReport }).proposed.pools;
    expect(cliPools.map((p) => [p.key, p.waitP50Ms, p.waitP95Ms])).toEqual(
      sim.pools.map((p) => [p.key, p.waitP50Ms, p.waitP95Ms]),
    );
    const checks: [number, number][] = [];
    const lines = [
      `traced means: spawn ${mean('spawn')} ms (${count('spawn')}), dispatch ${mean('dispatch')} ms (${count('dispatch')}), release ${mean('release')} ms (${count('release')})`,
    ];
    for (const [scalerName, set] of [
      ['small', 'linux,small'],
      ['large', 'large,linux'],
    ]) {
      const real = sortedCopy(
        trace.filter((j) => normalizeLabelSet(j.labels) === set).map((j) => j.queueWaitMs!),
      );
      const p = sim.pools.find((x) => x.key === `${scalerName}/${set}`)!;
      const api = whatIf.body.current.pools.find((x) => x.key === `${scalerName}/${set}`)!;
      expect(p.jobs).toBe(real.length);
      expect(api.jobs).toBe(real.length);
      for (const [q, simulated, byApi] of [
        [50, p.waitP50Ms, api.waitP50Ms],
        [95, p.waitP95Ms, api.waitP95Ms],
      ] as const) {
        const observed = percentile(real, q);
        lines.push(`${set} p${q}: real ${observed} ms, simulated ${simulated} ms (what-if API ${byApi} ms)`);
        for (const v of [simulated, byApi])
          checks.push([Math.abs(v - observed), Math.max(100, 0.2 * observed)]);
      }
    }
    const first = trace[0]!.submitMs;
    const lastEnd = Math.max(...trace.map((j) => j.submitMs + j.queueWaitMs! + j.runMs!));
    lines.push(`real span ${lastEnd - first} ms, simulated span ${sim.spanMs} ms`);
    process.stderr.write(`simulator fidelity:\n  ${lines.join('\n  ')}\n`);
    for (const [off, allowed] of checks) expect(off, lines.join('; ')).toBeLessThanOrEqual(allowed);
    expect(sim.jobs.unserved).toBe(0);
  }, 240_000);
});
