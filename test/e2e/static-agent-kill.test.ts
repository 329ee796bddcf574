/**
 * A static agent killed with SIGKILL cannot clean up after its job, so its job's dead-man switch
 * does: none of the running step's processes (the shell, a foreground child, a background one)
 * outlives the agent.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { submit, useTaggedJobs, waitForLine } from '../helpers/jobs.js';
import {
  ADMIN_BIN,
  AGENT_BIN,
  alive,
  eventually,
  runNode,
  startTestOrchestrator,
  type TestOrchestrator,
} from '../helpers/orchestrator.js';

let t: TestOrchestrator | undefined;
const agents: ReturnType<typeof runNode>[] = [];
const tagged = useTaggedJobs();
afterEach(async () => {
  for (const a of agents.splice(0)) if (a.child.pid && alive(a.child.pid)) a.child.kill('SIGKILL');
  await t?.stop();
  t = undefined;
});

async function startAgent(t: TestOrchestrator) {
  const minted = await runNode(
    [ADMIN_BIN, 'agent', 'token', 'create', '--labels', 'linux,killme', '--id', 'kill-me', '--json'],
    { KICI_SERVER_URL: t.orch.url, KICI_ADMIN_TOKEN: t.orch.adminToken },
  ).exited;
  expect(minted.code, minted.stderr).toBe(0);
  const { token } = JSON.parse(minted.stdout) as { token: string };
  const agent = runNode([AGENT_BIN], {
    KICI_ORCHESTRATOR_URL: t.orch.wsUrl,
    KICI_AGENT_ID: 'kill-me',
    KICI_AGENT_TOKEN: token,
    KICI_LABELS: 'linux,killme',
  });
  agents.push(agent);
  return agent;
}

describe('static agent killed with SIGKILL', () => {
  it('leaves none of its step processes running after earlier jobs of the same agent', async () => {
    // The agent keeps one watcher for all its jobs: a finished job's groups are forgotten, the
    // next job's are still killed.
    t = await startTestOrchestrator();
    const agent = await startAgent(t);
    const [first] = await submit(t, { first: { runsOn: ['killme'], steps: [{ run: 'echo first-done' }] } });
    await waitForLine(t, first!, /^first-done$/);
    const { tag, job } = tagged.job([{ run: 'sleep 1000 & echo working; sleep 1000' }], {
      runsOn: ['killme'],
    });
    const [id] = await submit(t, { long: job });
    await waitForLine(t, id!, /^working$/);
    expect(await tagged.alive(tag)).toBeGreaterThanOrEqual(3);
    agent.child.kill('SIGKILL');
    await agent.exited;
    await eventually(async () => (await tagged.alive(tag)) === 0, 10_000, 'every step process gone');
  }, 60_000);

  it('leaves none of its step processes running', async () => {
    t = await startTestOrchestrator();
    const agent = await startAgent(t);
    const { tag, job } = tagged.job([{ run: 'sleep 1000 & echo working; sleep 1000' }], {
      runsOn: ['killme'],
    });
    const [id] = await submit(t, { long: job });
    await waitForLine(t, id!, /^working$/);
    // The shell, its background sleep and its foreground sleep.
    expect(await tagged.alive(tag)).toBeGreaterThanOrEqual(3);
    agent.child.kill('SIGKILL');
    await agent.exited;
    await eventually(async () => (await tagged.alive(tag)) === 0, 10_000, 'every step process gone');
  }, 60_000);
});
