import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { runNode } from '../helpers/orchestrator.js';
import { alive, eventually } from '../helpers/orchestrator.js';
import {
  startOrchestratorProcess,
  startStaticAgentProcess,
  type OrchProcess,
} from '../helpers/orch-process.js';
import { freshTestDatabase, type TestDatabase } from '../helpers/pg-database.js';

/**
 * Retention with two orchestrators on one PostgreSQL: only the leader prunes (its pruned-rows
 * metric counts every job, the other's counts none), every finished job goes, and a pruned job
 * answers "pruned" through either instance.
 */

const JOBS = 30;
let db: TestDatabase;
const orchs: OrchProcess[] = [];
const agents: ReturnType<typeof runNode>[] = [];

beforeAll(async () => {
  db = await freshTestDatabase('clretain');
});
afterAll(async () => {
  for (const a of agents) if (a.child.pid && alive(a.child.pid)) a.child.kill('SIGKILL');
  await Promise.all(agents.map((a) => a.exited));
  for (const o of orchs) await o.stop();
  await db?.drop();
});

const prunedJobs = async (o: OrchProcess) => {
  const text = await (
    await fetch(`${o.url}/metrics`, { headers: { authorization: `Bearer ${o.adminToken}` } })
  ).text();
  return Number(/^kici_orch_retention_pruned_rows_total\{table="jobs"\} (\d+)$/m.exec(text)?.[1] ?? 0);
};

describe('retention in a cluster', () => {
  it('only the leader prunes; both answer "pruned" for a pruned job', async () => {
    const tag = randomBytes(3).toString('hex');
    const env = { KICI_CLUSTER_HEARTBEAT_MS: '400', KICI_RETAIN_JOBS: '1s', KICI_PRUNE_INTERVAL: '300ms' };
    for (const n of ['a', 'b'])
      orchs.push(
        await startOrchestratorProcess({
          databaseUrl: db.url,
          env,
          args: ['--instance-id', `rt-${n}-${tag}`],
        }),
      );
    for (const [i, o] of orchs.entries())
      agents.push(await startStaticAgentProcess(o, `rt-agent-${i}-${tag}`, ['linux', `rt-${tag}`]));
    const spec = Object.fromEntries(
      Array.from({ length: JOBS }, (_, k) => [
        `j${k}`,
        { runsOn: ['linux', `rt-${tag}`], steps: [{ run: 'true' }] },
      ]),
    );
    const run = await orchs[0]!.api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', { jobs: spec });
    expect(run.status).toBe(201);
    const ids = run.body.jobs.map((j) => j.id);
    await eventually(
      async () => {
        const r = await db.query<{ n: string }>(
          'select count(*) as n from job_tombstones where id = any($1)',
          [ids],
        );
        return Number(r[0]!.n) === JOBS ? true : undefined;
      },
      60_000,
      'every job pruned',
    );
    const [leader] = await db.query<{ id: string }>(
      'select id from kici_instances where leader and stopped_at is null',
    );
    const counts = await Promise.all(orchs.map(prunedJobs));
    const leaderIdx = orchs.findIndex((o) => o.output().stdout.includes(`"instanceId":"${leader!.id}"`));
    expect(leaderIdx).toBeGreaterThanOrEqual(0);
    expect(counts[leaderIdx]).toBe(JOBS);
    expect(counts[1 - leaderIdx]).toBe(0);
    for (const o of orchs) {
      const got = await o.api<{ error: string }>('GET', `/api/v1/jobs/${ids[0]}`);
      expect(got.status).toBe(410);
      expect(got.body.error).toBe('pruned');
    }
  });
});
