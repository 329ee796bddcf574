import { randomBytes } from 'node:crypto';
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

/**
 * Cross-instance cancel: two orchestrator processes on one PostgreSQL. A job runs on an agent
 * connected to A; `POST /api/v1/jobs/:id/cancel` is sent to B, which does not have the agent's
 * socket. The request reaches A through the row and NOTIFY (the poll backstop is 5 s, the answer
 * must come well before), A cancels the job on its agent, and the job ends cancelled. A queued job
 * submitted to A is cancelled through B as well.
 */

const tag = randomBytes(3).toString('hex');
const LABELS = ['linux', `ccan-${tag}`];
let db: TestDatabase;
let dir: string;
const procs: OrchProcess[] = [];
const agents: ReturnType<typeof runNode>[] = [];

beforeAll(async () => {
  db = await freshTestDatabase('clcancel');
  dir = await mkdtemp(join(tmpdir(), 'kici-clcancel-'));
});
afterAll(async () => {
  for (const a of agents)
    if (a.child.pid && alive(a.child.pid)) {
      a.child.kill('SIGTERM');
      await new Promise((r) => setTimeout(r, 200));
      a.child.kill('SIGTERM');
    }
  await Promise.all(agents.map((a) => a.exited));
  for (const o of procs) await o.stop();
  await db.drop();
  await rm(dir, { recursive: true, force: true });
});

const state = async (id: string) =>
  (
    await db.query<{ state: string; reason: string | null }>('select state, reason from jobs where id = $1', [
      id,
    ])
  )[0]!;

describe('cancel across two instances', () => {
  it('a cancel sent to B reaches the agent of A: the step is stopped and the job ends cancelled', async () => {
    // The default heartbeat (5 s) is also the poll backstop: a quick answer shows NOTIFY carried it.
    const a = await startOrchestratorProcess({ databaseUrl: db.url, args: ['--instance-id', `ca-${tag}`] });
    procs.push(a);
    const b = await startOrchestratorProcess({ databaseUrl: db.url, args: ['--instance-id', `cb-${tag}`] });
    procs.push(b);
    const agent = await startStaticAgentProcess(a, `ccan-agent-${tag}`, LABELS);
    agents.push(agent);

    const marks = join(dir, 'marks');
    const run = await a.api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
      jobs: {
        long: { runsOn: LABELS, steps: [{ run: `echo begin >> ${marks}; sleep 30; echo end >> ${marks}` }] },
      },
    });
    const id = run.body.jobs[0]!.id;
    await eventually(
      async () => (await readFile(marks, 'utf8').catch(() => '')).includes('begin'),
      20_000,
      'the step has begun on A',
    );

    const t0 = Date.now();
    const res = await b.api<{ id: string; state: string }>('POST', `/api/v1/jobs/${id}/cancel`);
    const tookMs = Date.now() - t0;
    expect(res).toEqual({ status: 200, body: { id, state: 'cancelled' } });
    expect(tookMs).toBeLessThan(2_500);
    expect((await state(id)).state).toBe('cancelled');
    // The agent was told: it stops the step and reports the job cancelled.
    await eventually(
      () => `${agent.output().stdout}${agent.output().stderr}`.includes(`job ${id} cancelled`),
      15_000,
      'the agent cancelled the job',
    );
    expect(await readFile(marks, 'utf8')).toBe('begin\n');
    // A cancel of a job that is final already is refused, from either instance.
    expect((await b.api('POST', `/api/v1/jobs/${id}/cancel`)).status).toBe(409);
    expect((await a.api('POST', `/api/v1/jobs/${id}/cancel`)).status).toBe(409);

    // The agent is free again and takes the next job; the cancelled one stays cancelled.
    const next = await a.api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
      jobs: { quick: { runsOn: LABELS, steps: [{ run: 'true' }] } },
    });
    expect((await a.waitForJob(next.body.jobs[0]!.id, 30_000)).state).toBe('succeeded');
    expect((await state(id)).state).toBe('cancelled');
  });

  it('a queued job submitted to A is cancelled through B', async () => {
    const [a, b] = procs as [OrchProcess, OrchProcess];
    // A token for these labels exists, but its agent never connects: the job waits in the queue.
    const idle = ['linux', `ccanq-${tag}`];
    const tok = await a.api('POST', '/api/v1/agents/tokens', { labels: idle, agentId: `ccanq-${tag}` });
    expect(tok.status).toBe(201);
    const run = await a.api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
      jobs: { waits: { runsOn: idle, steps: [{ run: 'true' }] } },
    });
    const id = run.body.jobs[0]!.id;
    expect((await state(id)).state).toBe('queued');
    const res = await b.api<{ id: string; state: string }>('POST', `/api/v1/jobs/${id}/cancel`);
    expect(res).toEqual({ status: 200, body: { id, state: 'cancelled' } });
    expect(await state(id)).toEqual({ state: 'cancelled', reason: 'cancelled by operator' });
    // A no longer offers it: it is gone from A's queue view too.
    expect((await a.api<{ state: string }>('GET', `/api/v1/jobs/${id}`)).body.state).toBe('cancelled');
  });
});
