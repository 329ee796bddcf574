import { randomBytes } from 'node:crypto';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  alive,
  eventually,
  startTestOrchestrator,
  type TestOrchestrator,
  type runNode,
} from '../helpers/orchestrator.js';
import {
  startOrchestratorProcess,
  startStaticAgentProcess,
  type OrchProcess,
} from '../helpers/orch-process.js';
import { freshTestDatabase, type TestDatabase } from '../helpers/pg-database.js';

/**
 * Dead instances: a starting instance leaves the running jobs of its live peers alone (before, its
 * recovery orphaned and then failed them), and the leader settles the jobs of a dead instance only
 * after its grace.
 */

const tag = randomBytes(3).toString('hex');
let db: TestDatabase;
const procs: OrchProcess[] = [];
const inproc: TestOrchestrator[] = [];
const agents: ReturnType<typeof runNode>[] = [];

beforeAll(async () => {
  db = await freshTestDatabase('cldead');
});
afterAll(async () => {
  // Two SIGTERMs: the agent cancels its job (and the job's processes) before it exits.
  for (const a of agents)
    if (a.child.pid && alive(a.child.pid)) {
      a.child.kill('SIGTERM');
      await new Promise((r) => setTimeout(r, 200));
      a.child.kill('SIGTERM');
    }
  await Promise.all(agents.map((a) => a.exited));
  for (const t of inproc) await t.stop();
  for (const o of procs) await o.stop();
  await db.drop();
});

const jobState = async (id: string) =>
  (
    await db.query<{ state: string; reason: string | null }>('select state, reason from jobs where id = $1', [
      id,
    ])
  )[0]!;

describe('dead instances on PostgreSQL', () => {
  it("a new instance does not touch a live peer's running job; once the peer dies the leader fails it after the grace", async () => {
    const env = { KICI_CLUSTER_HEARTBEAT_MS: '200' };
    const a = await startOrchestratorProcess({
      databaseUrl: db.url,
      env,
      args: ['--instance-id', `da-${tag}`],
    });
    procs.push(a);
    agents.push(await startStaticAgentProcess(a, `dead-agent-${tag}`, ['linux', `dead-${tag}`]));
    const run = await a.api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
      jobs: { long: { runsOn: ['linux', `dead-${tag}`], steps: [{ run: 'sleep 60' }] } },
    });
    const id = run.body.jobs[0]!.id;
    await eventually(async () => (await jobState(id)).state === 'running', 20_000, 'running on A');

    // B starts with a short reconnect grace: its recovery must not adopt (and fail) A's job.
    const b = await startTestOrchestrator({
      databaseUrl: db.url,
      instanceId: `db-${tag}`,
      clusterHeartbeatMs: 200,
      reconnectGraceMs: 300,
    });
    inproc.push(b);
    // A third instance: with only two, the survivor could not tell a dead peer from being cut
    // off itself, and partition safety makes it hold off (checked below).
    const c = await startTestOrchestrator({
      databaseUrl: db.url,
      instanceId: `dc-${tag}`,
      clusterHeartbeatMs: 200,
      reconnectGraceMs: 300,
    });
    inproc.push(c);
    await new Promise((r) => setTimeout(r, 1_500));
    expect((await jobState(id)).state).toBe('running');
    expect(b.orch.dispatcher.active.has(id)).toBe(false);
    expect(c.orch.dispatcher.active.has(id)).toBe(false);

    // A dies. B leads; after A is dead (3 beats) plus the grace, the job is failed with the reason.
    await a.kill9();
    const settled = await eventually(
      async () => {
        const s = await jobState(id);
        return s.state !== 'running' ? s : undefined;
      },
      20_000,
      'the dead instance’s job settled',
    );
    expect(settled.state).toBe('failed');
    // Not before 3 missed beats plus the grace, counted from A's last heartbeat on the database's
    // clock (both stamps are its now()); a moment taken here after the kill would be later than
    // that beat by up to an interval plus however long the kill took on a loaded host.
    const [gap] = await db.query<{ ms: number }>(
      `select extract(epoch from (j.finished_at - i.last_heartbeat)) * 1000 as ms
         from jobs j, kici_instances i where j.id = $1 and i.id = $2`,
      [id, `da-${tag}`],
    );
    expect(Number(gap!.ms)).toBeGreaterThanOrEqual(3 * 200 + 300);
    expect(settled.reason).toMatch(
      new RegExp(`orchestrator instance da-${tag} died; agent dead-agent-${tag} did not come back`),
    );
  });
});

describe('partition safety', () => {
  it('a leader that met peers and now sees none alive holds off: the dead peer’s job is left alone', async () => {
    const db2 = await freshTestDatabase('cldeadpart');
    // B leads from the start, so it meets A alive in its own term whatever the host's load: were
    // B to take the lease only after A died, it would never have met A, and reaping is then right.
    const said: string[] = [];
    const b = await startTestOrchestrator({
      databaseUrl: db2.url,
      instanceId: `pb-${tag}`,
      clusterHeartbeatMs: 200,
      reconnectGraceMs: 300,
      logger: pino({ level: 'warn' }, { write: (line: string) => void said.push(line) }),
    });
    inproc.push(b);
    await eventually(() => b.orch.isLeader(), 10_000, 'B leads');
    const a = await startOrchestratorProcess({
      databaseUrl: db2.url,
      env: { KICI_CLUSTER_HEARTBEAT_MS: '200' },
      args: ['--instance-id', `pa-${tag}`],
    });
    procs.push(a);
    const agent = await startStaticAgentProcess(a, `part-agent-${tag}`, ['linux', `part-${tag}`]);
    agents.push(agent);
    const run = await a.api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
      jobs: { long: { runsOn: ['linux', `part-${tag}`], steps: [{ run: 'sleep 60' }] } },
    });
    const id = run.body.jobs[0]!.id;
    const state = async () =>
      (await db2.query<{ state: string }>('select state from jobs where id = $1', [id]))[0]!.state;
    await eventually(async () => (await state()) === 'running', 20_000, 'running on A');
    expect(b.orch.isLeader()).toBe(true);

    await a.kill9();
    // The guard's own word that it holds, naming A among the peers it met.
    const holds = (l: string) => l.includes('the leader holds off') && l.includes(`pa-${tag}`);
    await eventually(() => said.some(holds), 20_000, 'B to say it holds off');
    // Far past dead (3 beats) plus the grace: still running, because B reaches none of its peers.
    await new Promise((r) => setTimeout(r, 3_000));
    expect(await state()).toBe('running');
    expect(b.orch.isLeader()).toBe(true);
    await b.stop();
    await db2.drop();
  });
});
