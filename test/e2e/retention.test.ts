import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { submit, waitForLine } from '../helpers/jobs.js';
import {
  ADMIN_BIN,
  AGENT_BIN,
  alive,
  runNode,
  startTestOrchestrator,
  type TestOrchestrator,
} from '../helpers/orchestrator.js';
import { DEFAULT_RETENTION } from '../../src/store/retention/policy.js';
import type { PruneReport } from '../../src/store/retention/pruner.js';

/**
 * Retention with its settings in seconds: 200 finished jobs are pruned by the leader's periodic
 * task while a running and a queued job stay untouched; a pruned job answers "pruned" (HTTP 410
 * and `kici-admin job get`), a job that never existed still answers 404.
 */

const JOBS = 200;
let t: TestOrchestrator;
const agents: ReturnType<typeof runNode>[] = [];
const admin = (args: string[]) =>
  runNode([ADMIN_BIN, ...args], { KICI_SERVER_URL: t.orch.url, KICI_ADMIN_TOKEN: t.orch.adminToken }).exited;

async function startStaticAgent(agentId: string, label: string) {
  const tok = await t.api<{ token: string }>('POST', '/api/v1/agents/tokens', {
    labels: ['linux', label],
    agentId,
  });
  expect(tok.status).toBe(201);
  agents.push(
    runNode([AGENT_BIN], {
      KICI_ORCHESTRATOR_URL: t.orch.wsUrl,
      KICI_AGENT_ID: agentId,
      KICI_AGENT_TOKEN: tok.body.token,
      KICI_LABELS: `linux,${label}`,
    }),
  );
}

/** Resolves when `n` jobs have reached a final state (told by the orchestrator, not polled). */
function finishedJobs(n: number): Promise<void> {
  const metrics = t.orch.metrics;
  const original = metrics.jobFinished.bind(metrics);
  let seen = 0;
  return new Promise((resolve) => {
    metrics.jobFinished = (id, result, now) => {
      original(id, result, now);
      if (++seen === n) resolve();
    };
  });
}

beforeAll(async () => {
  t = await startTestOrchestrator({
    retention: { ...DEFAULT_RETENTION, jobsMs: 1000, intervalMs: 500, batchRows: 37 },
  });
  await startStaticAgent('ret-fast', 'fast');
  await startStaticAgent('ret-hold', 'hold');
});
let live: string | undefined;
afterAll(async () => {
  // The held job's processes belong to its agent: cancel it before the agent goes.
  if (live && t) {
    await t.api('POST', `/api/v1/jobs/${live}/cancel`);
    await t.waitForJob(live, ['cancelled'], 30_000);
  }
  for (const a of agents.splice(0)) if (a.child.pid && alive(a.child.pid)) a.child.kill('SIGKILL');
  await t?.stop();
});

describe('retention in seconds', () => {
  it('prunes 200 finished jobs, leaves open ones alone, and answers "pruned" for each', async () => {
    [live] = await submit(t, {
      live: { runsOn: ['hold'], steps: [{ run: 'echo holding; sleep 600' }] },
    });
    await waitForLine(t, live!, /^holding$/);
    // The only agent that could take it is busy: it stays queued throughout.
    const [queued] = await submit(t, { waiting: { runsOn: ['hold'], steps: [{ run: 'true' }] } });
    // Counted from before the first job runs: the pruner goes on while the burst runs.
    let pruned = 0;
    const allPruned = new Promise<void>((resolve) => {
      const onReport = (r: PruneReport) => {
        pruned += r.tables.jobs ?? 0;
        if (pruned < JOBS) return;
        t.orch.retention!.events.off('report', onReport);
        resolve();
      };
      t.orch.retention!.events.on('report', onReport);
    });
    const finished = finishedJobs(JOBS);
    const jobs: Record<string, unknown> = {};
    for (let i = 0; i < JOBS; i++) jobs[`j${i}`] = { runsOn: ['fast'], steps: [{ run: `echo out-${i}` }] };
    const ids = await submit(t, jobs);
    await finished;

    // The pruner's own reports say when all 200 are gone.
    await allPruned;
    expect(pruned).toBe(JOBS);
    // The CLI's reads are independent: their processes start together, each is checked below.
    const [cliRun, dryRun, diagJsonRun, diagRun] = [
      admin(['job', 'get', ids[5]!]),
      admin(['prune', '--dry-run', '--json']),
      admin(['diagnose', '--json']),
      admin(['diagnose']),
    ];

    for (const id of [ids[0]!, ids[JOBS - 1]!]) {
      const got = await t.api<{ error: string; state: string; problems: string[] }>(
        'GET',
        `/api/v1/jobs/${id}`,
      );
      expect(got.status).toBe(410);
      expect(got.body).toMatchObject({ error: 'pruned', state: 'succeeded' });
      expect(got.body.problems[0]).toMatch(/was pruned by retention/);
      expect((await t.api('GET', `/api/v1/jobs/${id}/logs`)).status).toBe(410);
    }
    const cli = await cliRun;
    expect(cli.code).toBe(1);
    expect(cli.stderr).toMatch(new RegExp(`job ${ids[5]} \\(j5, succeeded\\) was pruned by retention`));
    expect((await t.api('GET', '/api/v1/jobs/j-000000000000')).status).toBe(404);

    // Open jobs are untouched, with their logs.
    const held = await t.api<{ state: string }>('GET', `/api/v1/jobs/${live}`);
    expect(held.body.state).toBe('running');
    await waitForLine(t, live!, /^holding$/, 1000);
    expect((await t.api<{ state: string }>('GET', `/api/v1/jobs/${queued}`)).body.state).toBe('queued');

    // Nothing left to prune; the metric counts what went and the database size is shown.
    const dry = await dryRun;
    expect(dry.code).toBe(0);
    expect(JSON.parse(dry.stdout)).toMatchObject({ dryRun: true, tables: { jobs: 0 } });
    const metrics = await (
      await fetch(`${t.orch.url}/metrics`, { headers: { authorization: `Bearer ${t.orch.adminToken}` } })
    ).text();
    expect(metrics).toMatch(
      new RegExp(`^kici_orch_retention_pruned_rows_total\\{table="jobs"\\} ${JOBS}$`, 'm'),
    );
    expect(metrics).toMatch(/^kici_orch_retention_pruned_rows_total\{table="job_log_chunks"\} [1-9]\d*$/m);
    expect(Number(/^kici_orch_database_bytes (\d+)/m.exec(metrics)?.[1])).toBeGreaterThan(1_000_000);
    const diag = await diagJsonRun;
    const d = JSON.parse(diag.stdout) as { database: { bytes: number; retention: Record<string, string> } };
    expect(d.database.bytes).toBeGreaterThan(1_000_000);
    expect(d.database.retention['retain-jobs']).toBe('1s');
    expect((await diagRun).stdout).toMatch(/^database \(pglite\): \d+Mi\n {2}retention: retain-jobs 1s/m);
  }, 180_000);
});
