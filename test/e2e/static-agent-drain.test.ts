import { afterEach, describe, expect, it } from 'vitest';
import { submit, waitForLine } from '../helpers/jobs.js';
import {
  AGENT_BIN,
  alive,
  runNode,
  startTestOrchestrator,
  type TestOrchestrator,
} from '../helpers/orchestrator.js';

/**
 * Static agents: the first SIGTERM lets the current job finish and report before the agent exits; a
 * second SIGTERM cancels the job. A restart of a build host loses nothing.
 */

let t: TestOrchestrator | undefined;
const agents: ReturnType<typeof runNode>[] = [];
afterEach(async () => {
  for (const a of agents.splice(0)) if (a.child.pid && alive(a.child.pid)) a.child.kill('SIGKILL');
  await t?.stop();
  t = undefined;
});

async function startStaticAgent(t: TestOrchestrator, agentId: string) {
  const tok = await t.api<{ token: string }>('POST', '/api/v1/agents/tokens', {
    labels: ['linux', 'drain'],
    agentId,
  });
  expect(tok.status).toBe(201);
  const agent = runNode([AGENT_BIN], {
    KICI_ORCHESTRATOR_URL: t.orch.wsUrl,
    KICI_AGENT_ID: agentId,
    KICI_AGENT_TOKEN: tok.body.token,
    KICI_LABELS: 'linux,drain',
  });
  agents.push(agent);
  return agent;
}

const slowJob = {
  runsOn: ['drain'],
  steps: [{ name: 'work', run: 'echo working; sleep 3; echo finished' }],
};

describe('static agent: SIGTERM drains, a second SIGTERM cancels', () => {
  it('first SIGTERM: the running job finishes and is reported, no new job is taken, the agent exits 0', async () => {
    t = await startTestOrchestrator();
    const agent = await startStaticAgent(t, 'drain-1');
    const [id] = await submit(t, { slow: slowJob });
    await waitForLine(t, id!, /^working$/);
    agent.child.kill('SIGTERM');
    // Submitted during the drain: it must wait for another agent, not be taken by this one.
    const [later] = await submit(t, { later: { runsOn: ['drain'], steps: [{ run: 'echo later' }] } });
    const done = await t.waitForJob(id!, undefined, 30_000);
    expect(done.state).toBe('succeeded');
    expect(done.agentId).toBe('drain-1');
    const exit = await agent.exited;
    expect(exit.code).toBe(0);
    expect(exit.stdout).toMatch(/draining \(SIGTERM\)/);
    expect((await t.api<{ state: string }>('GET', `/api/v1/jobs/${later}`)).body.state).toBe('queued');
  });

  it('second SIGTERM: the job is cancelled, reported as such, and the agent exits', async () => {
    t = await startTestOrchestrator();
    const agent = await startStaticAgent(t, 'drain-2');
    const [id] = await submit(t, {
      slow: { runsOn: ['drain'], steps: [{ name: 'work', run: 'echo working; sleep 1000' }] },
    });
    await waitForLine(t, id!, /^working$/);
    agent.child.kill('SIGTERM');
    await new Promise((r) => setTimeout(r, 300));
    expect(alive(agent.child.pid!)).toBe(true);
    agent.child.kill('SIGTERM');
    const exit = await agent.exited;
    expect(exit.code).toBe(0);
    const done = await t.waitForJob(id!, undefined, 30_000);
    expect(done.state).toBe('cancelled');
    expect(done.agentId).toBe('drain-2');
  });

  it('SIGTERM to an idle static agent: it exits at once', async () => {
    t = await startTestOrchestrator();
    const agent = await startStaticAgent(t, 'drain-3');
    await waitForAgent(t, 'drain-3');
    agent.child.kill('SIGTERM');
    const exit = await agent.exited;
    expect(exit.code).toBe(0);
  });
});

async function waitForAgent(t: TestOrchestrator, id: string): Promise<void> {
  for (let i = 0; i < 200; i++) {
    const res = await t.api<{ agents: { id: string }[] }>('GET', '/api/v1/agents');
    if (res.body.agents.some((a) => a.id === id)) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`agent ${id} never registered`);
}
