import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { normalizeLabelSet, scalerFileSchema } from '../../src/config/index.js';
import { runSimulation } from '../../src/scaler/sim/report.js';
import { spawnLatencyFromMetrics } from '../../src/scaler/sim/spawn-latency.js';
import { percentile, sortedCopy } from '../../src/scaler/sim/stats.js';
import { parseTrace } from '../../src/scaler/sim/trace.js';
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
  it('simulated queue-wait p95 per label set is within 20 % (p50 within 35 %, or 100 ms) of the real one', async () => {
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
    // When the scaler decided to spawn an agent for a job, and which agent that was.
    const decided = new Map<string, { at: number; agentId: string }>();
    const provision = scaler.provision.bind(scaler);
    scaler.provision = async (match, res, job) => {
      const at = Date.now();
      const r = await provision(match, res, job);
      if (job && r.action === 'spawning') decided.set(job.id, { at, agentId: r.agentId });
      return r;
    };
    const jobs: Record<string, unknown> = {};
    for (let i = 0; i < JOBS; i++) {
      jobs[`j${i}`] = {
        runsOn: ['linux', i % 3 === 0 ? 'large' : 'small'],
        steps: [{ run: `sleep ${[0.05, 0.1, 0.15, 0.2][i % 4]}` }],
      };
    }
    const { status, body } = await t.api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', { jobs });
    expect(status).toBe(201);
    const done = await Promise.all(body.jobs.map((j) => t!.waitForJob(j.id, undefined, 200_000)));
    for (const j of done) expect(j.state, `${j.id}: ${j.reason}`).toBe('succeeded');

    const get = async (path: string) => {
      const res = await fetch(`${t!.orch.url}${path}`, {
        headers: { authorization: `Bearer ${t!.orch.adminToken}` },
      });
      expect(res.status, path).toBe(200);
      return res.text();
    };
    const trace = parseTrace(await get('/api/v1/trace/jobs?since=1h'));
    expect(trace).toHaveLength(JOBS);
    // The CLI writes the same trace; a window that is not a duration is refused, naming the field.
    const out = join(t.dataDir, 'jobs.jsonl');
    const env = { KICI_SERVER_URL: t.orch.url, KICI_ADMIN_TOKEN: t.orch.adminToken };
    const cli = await runNode([ADMIN_BIN, 'job', 'export-trace', '--since', '1h', '--out', out], env).exited;
    expect(cli.code, cli.stderr).toBe(0);
    expect(parseTrace(await readFile(out, 'utf8'))).toEqual(trace);
    const bad = await t.api<{ problems: string[] }>('GET', '/api/v1/trace/jobs?since=soon');
    expect(bad.status).toBe(400);
    expect(bad.body.problems[0]).toMatch(/^since: /);
    const spawnMs = spawnLatencyFromMetrics(await get('/metrics'))['bare-metal'];
    expect(spawnMs).toBeGreaterThan(0);
    // What the server measured around a spawn: registration to the job starting, and the job ending
    // to the agent being gone (its capacity free again).
    const rows = await t.orch.store.db
      .selectFrom('jobs')
      .innerJoin('agents', 'agents.id', 'jobs.agent_id')
      .select(['jobs.id', 'jobs.agent_id', 'jobs.started_at', 'jobs.finished_at'])
      .execute();
    const ms = (d: unknown) => new Date(d as string).getTime();
    // Means, not medians: spawns that start together are slower, and the queue feels every one.
    const mean = (xs: number[]) => Math.round(xs.reduce((a, b) => a + b, 0) / Math.max(1, xs.length));
    // Decision to start, for jobs that ran on the agent spawned for them: the spawn as jobs feel it.
    const spawnToStart = mean(
      rows
        .filter((r) => decided.get(r.id)?.agentId === r.agent_id)
        .map((r) => ms(r.started_at) - decided.get(r.id)!.at),
    );
    // A job's end to the spawn its freed capacity allowed: each end is paired with the first later
    // spawn decision not already paired (the agent's exit, teardown and the re-dispatch, as one).
    const decisions = [...decided.values()].map((d) => d.at).sort((x, y) => x - y);
    const ends = rows.map((r) => ms(r.finished_at)).sort((x, y) => x - y);
    const gaps: number[] = [];
    let k = 0;
    for (const end of ends) {
      while (k < decisions.length && decisions[k]! < end) k++;
      if (k >= decisions.length) break;
      gaps.push(decisions[k++]! - end);
    }
    const releaseMs = mean(gaps);

    const sim = runSimulation(scalerFileSchema.parse(config), trace, {
      spawnMs: { 'bare-metal': spawnToStart },
      releaseMs,
    });
    const checks: [number, number][] = [];
    const lines = [
      `spawn latency metric ${spawnMs} ms, decision to start ${spawnToStart} ms, release ${releaseMs} ms`,
    ];
    for (const [scalerName, set] of [
      ['small', 'linux,small'],
      ['large', 'large,linux'],
    ]) {
      const real = sortedCopy(
        trace.filter((j) => normalizeLabelSet(j.labels) === set).map((j) => j.queueWaitMs!),
      );
      const p = sim.pools.find((x) => x.key === `${scalerName}/${set}`)!;
      expect(p.jobs).toBe(real.length);
      for (const [q, simulated] of [
        [50, p.waitP50Ms],
        [95, p.waitP95Ms],
      ] as const) {
        const observed = percentile(real, q);
        lines.push(`${set} p${q}: real ${observed} ms, simulated ${simulated} ms`);
        // p95 holds to 20 %. p50 is given 35 %: on a loaded host the first round of spawns, all
        // started together, is slower than the mean spawn, and the replay uses one spawn time.
        const share = q === 95 ? 0.2 : 0.35;
        checks.push([Math.abs(simulated - observed), Math.max(100, share * observed)]);
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
