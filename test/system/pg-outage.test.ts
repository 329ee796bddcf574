import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { alive, eventually, type runNode } from '../helpers/orchestrator.js';
import {
  startOrchestratorProcess,
  startStaticAgentProcess,
  type OrchProcess,
} from '../helpers/orch-process.js';
import { freshTestDatabase, type TestDatabase } from '../helpers/pg-database.js';
import { TcpProxy } from '../helpers/tcp-proxy.js';

/**
 * Database outage: PostgreSQL ending the orchestrator's connections (a restart,
 * `pg_terminate_backend`) or vanishing altogether must not kill it. /readyz says not-ready while
 * the store is away, the pool reconnects, and every job still runs exactly once.
 *
 * The shared PostgreSQL cannot be restarted here (other suites use it), so "connections ended"
 * is `pg_terminate_backend` from another connection, and "database away" is a TCP relay between
 * the orchestrator and PostgreSQL that the test cuts and restores.
 */

const LABELS = ['linux', 'pgoutage'];
let db: TestDatabase;
let proxy: TcpProxy;
let orch: OrchProcess | undefined;
let marksDir: string;
const agents: ReturnType<typeof runNode>[] = [];

beforeAll(async () => {
  db = await freshTestDatabase('pgoutage');
  const target = new URL(db.url);
  proxy = new TcpProxy(target.hostname, Number(target.port));
  await proxy.open();
  marksDir = await mkdtemp(join(tmpdir(), 'kici-pgoutage-'));
});

afterAll(async () => {
  for (const a of agents.splice(0)) if (a.child.pid && alive(a.child.pid)) a.child.kill('SIGKILL');
  await Promise.all(agents.map((a) => a.exited));
  await orch?.stop();
  await proxy.shut();
  await db.drop();
  await rm(marksDir, { recursive: true, force: true });
});

/** Each step appends its own mark: a job run twice shows its marks twice. */
function job(marks: string) {
  return {
    runsOn: LABELS,
    steps: [
      { run: `echo "$KICI_JOB_ID:a" >> ${marks}; sleep 0.1` },
      { run: `echo "$KICI_JOB_ID:b" >> ${marks}` },
    ],
  };
}

/** Submit `n` jobs in runs of 5; a refused submit (store away) is retried, so each id is accepted once. */
async function submitJobs(o: OrchProcess, n: number, marks: string): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < n; i += 5) {
    const jobs = Object.fromEntries(
      Array.from({ length: Math.min(5, n - i) }, (_, k) => [`j${i + k}`, job(marks)]),
    );
    const res = await eventually(
      async () => {
        const r = await o.api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', { jobs });
        return r.status === 201 ? r : undefined;
      },
      30_000,
      'an accepted submit',
    );
    ids.push(...res.body.jobs.map((j) => j.id));
  }
  return ids;
}

describe('orchestrator on PostgreSQL: the database going away', () => {
  it('survives terminated backends and a cut link, reports not-ready meanwhile, and runs every job exactly once', async () => {
    orch = await startOrchestratorProcess({ databaseUrl: proxy.urlFor(db.url) });
    for (let i = 0; i < 4; i++) agents.push(await startStaticAgentProcess(orch, `pgout-${i}`, LABELS));
    const marks = join(marksDir, 'marks');
    const ids = await submitJobs(orch, 40, marks);

    // 1. Connections ended by the server, three times, while jobs run.
    await eventually(
      async () => (await readFile(marks, 'utf8').catch(() => '')).length > 0,
      30_000,
      'first marks',
    );
    for (let i = 0; i < 3; i++) {
      expect(await db.terminateBackends()).toBeGreaterThanOrEqual(0);
      await new Promise((r) => setTimeout(r, 300));
      expect(orch.running()).toBe(true);
    }
    // The pool opens fresh connections: the next write succeeds.
    await eventually(async () => (await orch!.readyz()).status === 200, 15_000, 'ready after terminate');
    ids.push(...(await submitJobs(orch, 10, marks)));

    // 2. The database away: /readyz turns not-ready, the process stays up.
    await proxy.shut();
    const down = await eventually(
      async () => {
        const r = await orch!.readyz();
        return r.status === 503 ? r : undefined;
      },
      15_000,
      '/readyz 503 while the database is away',
    );
    expect(down.body.status).toBe('store-unwritable');
    const refused = await orch.api('POST', '/api/v1/runs', { jobs: { x: job(marks) } });
    expect(refused.status).not.toBe(201);
    await new Promise((r) => setTimeout(r, 2_000));
    expect(orch.running()).toBe(true);
    expect((await orch.readyz()).status).toBe(503);

    // 3. Back: ready again, and new work is taken.
    await proxy.open();
    await eventually(
      async () => (await orch!.readyz()).status === 200,
      20_000,
      '/readyz 200 after the outage',
    );
    ids.push(...(await submitJobs(orch, 10, marks)));

    const results = await Promise.all(ids.map((id) => orch!.waitForJob(id, 180_000)));
    // The outage did hit results in flight (they were retried, not dropped).
    expect(orch.output().stdout).toMatch(/could not store the job result/);
    expect(results.filter((r) => r.state !== 'succeeded').map((r) => [r.id, r.state, r.reason])).toEqual([]);
    expect(orch.running()).toBe(true);

    // Exactly once: each step's mark appears once per job, and nothing else ran.
    const lines = (await readFile(marks, 'utf8')).trim().split('\n');
    const counts = new Map<string, number>();
    for (const l of lines) counts.set(l, (counts.get(l) ?? 0) + 1);
    const expected = ids.flatMap((id) => [`${id}:a`, `${id}:b`]).sort();
    expect([...counts.keys()].sort()).toEqual(expected);
    expect([...counts.entries()].filter(([, n]) => n !== 1)).toEqual([]);
    // The store holds exactly the accepted jobs, all finished (no half-committed run left behind).
    const rows = await db.query<{ state: string; n: string }>(
      `select state, count(*) as n from (select state from jobs) j group by state`,
    );
    expect(rows.map((r) => [r.state, Number(r.n)])).toEqual([['succeeded', ids.length]]);
  });
});
