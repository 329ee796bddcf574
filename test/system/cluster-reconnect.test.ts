import { randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
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
import { jobGate } from '../helpers/jobs.js';
import { TcpProxy } from '../helpers/tcp-proxy.js';
import { createStore, openDatabase } from '../../src/store/index.js';

/**
 * Jobs are kept if their agents reconnect to another instance: instance A (a real process) is
 * killed -9 while its static agent runs a step. The agent dials one URL, a TCP relay the test
 * re-points from A to B, so its reconnect lands on B. B takes the job over, the step finishes, and
 * the job succeeds exactly once, with no cancel; the leader's dead-instance settlement (its grace
 * passes while a gate holds the step) leaves the job alone.
 */

const tag = randomBytes(3).toString('hex');
const LABELS = ['linux', `recon-${tag}`];
const HEARTBEAT_MS = 200;
// Long enough for the agent's reconnect on a busy host; the step is held past it by a gate.
const GRACE_MS = 5_000;
let db: TestDatabase;
let dir: string;
let proxy: TcpProxy | undefined;
const procs: OrchProcess[] = [];
const inproc: TestOrchestrator[] = [];
const agents: ReturnType<typeof runNode>[] = [];
const gates: Awaited<ReturnType<typeof jobGate>>[] = [];

beforeAll(async () => {
  db = await freshTestDatabase('clrecon');
  dir = await mkdtemp(join(tmpdir(), 'kici-clrecon-'));
});
afterAll(async () => {
  // Two SIGTERMs: the agent cancels a job still running (and its processes) before it exits.
  for (const a of agents)
    if (a.child.pid && alive(a.child.pid)) {
      a.child.kill('SIGTERM');
      await new Promise((r) => setTimeout(r, 200));
      a.child.kill('SIGTERM');
    }
  await Promise.all(agents.map((a) => a.exited));
  await proxy?.shut();
  for (const t of inproc) await t.stop();
  for (const o of procs) await o.stop();
  await db.drop();
  for (const g of gates) await g.close();
  await rm(dir, { recursive: true, force: true });
});

const jobRow = async (id: string) =>
  (
    await db.query<{ state: string; reason: string | null; owner_instance: string | null }>(
      'select state, reason, owner_instance from jobs where id = $1',
      [id],
    )
  )[0]!;

describe('a running job whose instance dies', () => {
  it('is taken over by the instance its agent reconnects to and succeeds exactly once, with no cancel', async () => {
    const a = await startOrchestratorProcess({
      databaseUrl: db.url,
      env: { KICI_CLUSTER_HEARTBEAT_MS: String(HEARTBEAT_MS) },
      args: ['--instance-id', `ra-${tag}`],
    });
    procs.push(a);
    // Three instances: with two, partition safety would keep the survivor from settling anything.
    const peer = (id: string) =>
      startTestOrchestrator({
        databaseUrl: db.url,
        instanceId: id,
        clusterHeartbeatMs: HEARTBEAT_MS,
        reconnectGraceMs: GRACE_MS,
      });
    const b = await peer(`rb-${tag}`);
    inproc.push(b);
    const c = await peer(`rc-${tag}`);
    inproc.push(c);

    proxy = new TcpProxy('127.0.0.1', Number(new URL(a.url).port));
    await proxy.open();
    const agent = await startStaticAgentProcess(a, `recon-agent-${tag}`, LABELS, proxy.urlFor(a.wsUrl));
    agents.push(agent);

    const marks = join(dir, 'marks');
    const gate = await jobGate();
    gates.push(gate);
    const run = await a.api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
      jobs: {
        long: {
          runsOn: LABELS,
          steps: [{ run: `echo begin >> ${marks}; ${gate.wait}; echo end-${tag} >> ${marks}` }],
        },
      },
    });
    expect(run.status).toBe(201);
    const id = run.body.jobs[0]!.id;
    await eventually(
      async () => (await readFile(marks, 'utf8').catch(() => '')).includes('begin'),
      20_000,
      'the step has begun on A',
    );
    // The "running" mark is stored within its deadline (250 ms), not with the step's first output.
    await eventually(async () => (await jobRow(id)).state === 'running', 5_000, 'the row says running');
    expect(await jobRow(id)).toMatchObject({ state: 'running', owner_instance: `ra-${tag}` });

    // The agent's next connection lands on B; then A dies mid-step.
    proxy.pointTo('127.0.0.1', Number(new URL(b.orch.url).port));
    await a.kill9();
    const diedAt = Date.now();

    await eventually(() => b.orch.dispatcher.active.has(id), 60_000, 'B holds the job');
    expect((await jobRow(id)).owner_instance).toBe(`rb-${tag}`);
    await eventually(
      async () =>
        (await c.orch.clusterStatus()).instances.find((i) => i.id === `ra-${tag}`)?.state === 'dead',
      30_000,
      'A is declared dead',
    );
    // The settlement of A's jobs is due once A is dead and the grace has run: let it come and go
    // (nothing marks a settlement that leaves a job alone), then let the step end.
    const due = diedAt + 3 * HEARTBEAT_MS + GRACE_MS + 1_000;
    await new Promise((r) => setTimeout(r, Math.max(0, due - Date.now())));
    expect(await jobRow(id)).toMatchObject({ state: 'running', owner_instance: `rb-${tag}` });
    await gate.open();
    const done = await b.waitForJob(id, undefined, 30_000);
    const finishedAt = Date.now();
    expect(done.state).toBe('succeeded');
    expect(done.reason).toBeNull();
    expect(finishedAt - diedAt).toBeGreaterThan(3 * HEARTBEAT_MS + GRACE_MS + 500);
    expect(await readFile(marks, 'utf8')).toBe(`begin\nend-${tag}\n`);
    // No cancel reached the agent: it reports the job as succeeded, and nothing else.
    const out = agent.output();
    expect(`${out.stdout}${out.stderr}`).toContain(`job ${id} succeeded`);
    expect(`${out.stdout}${out.stderr}`).not.toMatch(/cancel/i);
    // Still final and B's after a few more leader sweeps.
    await new Promise((r) => setTimeout(r, 4 * HEARTBEAT_MS));
    expect(await jobRow(id)).toMatchObject({ state: 'succeeded', owner_instance: `rb-${tag}` });
    // The agents row moved with the agent: the leader's clearing of A's rows leaves it connected.
    const [agentRow] = await db.query<{ state: string; instance_id: string }>(
      'select state, instance_id from agents where id = $1',
      [`recon-agent-${tag}`],
    );
    expect(agentRow).toEqual({ state: 'connected', instance_id: `rb-${tag}` });
  });

  it('an agent that reconnects to the same instance, restarted, goes on as before (no take-over)', async () => {
    // Alone: the short-grace peers above would settle the job while its instance restarts.
    for (const t of inproc) await t.stop();
    const start = () =>
      startOrchestratorProcess({
        databaseUrl: db.url,
        env: { KICI_CLUSTER_HEARTBEAT_MS: String(HEARTBEAT_MS) },
        args: ['--instance-id', `rs-${tag}`],
      });
    const a = await start();
    procs.push(a);
    const relay = new TcpProxy('127.0.0.1', Number(new URL(a.url).port));
    await relay.open();
    try {
      const labels = ['linux', `recon-same-${tag}`];
      const agent = await startStaticAgentProcess(a, `recon-same-${tag}`, labels, relay.urlFor(a.wsUrl));
      agents.push(agent);
      const marks = join(dir, 'marks-same');
      const run = await a.api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
        jobs: {
          long: { runsOn: labels, steps: [{ run: `echo begin >> ${marks}; sleep 5; echo end >> ${marks}` }] },
        },
      });
      const id = run.body.jobs[0]!.id;
      await eventually(
        async () => (await readFile(marks, 'utf8').catch(() => '')).includes('begin'),
        20_000,
        'the step has begun',
      );
      await a.kill9();
      // The same instance id starts again (on a new port, which the relay now points at).
      const again = await start();
      procs.push(again);
      relay.pointTo('127.0.0.1', Number(new URL(again.url).port));
      const done = await again.waitForJob(id, 30_000);
      expect(done.state).toBe('succeeded');
      expect(await readFile(marks, 'utf8')).toBe('begin\nend\n');
      expect((await jobRow(id)).owner_instance).toBe(`rs-${tag}`);
      const out = agent.output();
      expect(`${out.stdout}${out.stderr}`).not.toMatch(/cancel/i);
    } finally {
      await relay.shut();
    }
  });

  it('race on PostgreSQL: instances trying on their own connections, exactly one takes the job over', async () => {
    // Eight instances, each with its own pool, read the same owner and try at once, ten rounds.
    const opened = await Promise.all(Array.from({ length: 8 }, () => openDatabase({ url: db.url })));
    try {
      const stores = opened.map((o) => createStore(o.db));
      for (let round = 0; round < 10; round++) {
        const run = `race-run-${tag}-${round}`;
        const job = `race-${tag}-${round}`;
        await db.query('insert into runs (id, created_at) values ($1, now())', [run]);
        await db.query(
          `insert into jobs (id, run_id, name, state, runs_on, spec, agent_id, owner_instance, created_at)
           values ($1, $2, 'j', 'running', '[]', '{}', 'race-agent', 'gone-owner', now())`,
          [job, run],
        );
        const won = await Promise.all(
          stores.map((st, i) =>
            st.jobs.adoptActive(job, 'race-agent', { from: 'gone-owner', to: `racer-${i}` }, new Date()),
          ),
        );
        const winners = won.flatMap((r, i) => (r ? [`racer-${i}`] : []));
        expect(winners.length).toBe(1);
        expect((await jobRow(job)).owner_instance).toBe(winners[0]);
      }
    } finally {
      for (const o of opened) await o.close();
    }
  });
});
