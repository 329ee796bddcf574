import { afterEach, describe, expect, it } from 'vitest';
import { jobGate, submit, useTaggedJobs, waitForLine } from '../helpers/jobs.js';
import {
  ADMIN_BIN,
  AGENT_BIN,
  alive,
  eventually,
  runNode,
  startTestOrchestrator,
  type TestOrchestrator,
} from '../helpers/orchestrator.js';
import { SkipClock } from '../helpers/skip-clock.js';

/**
 * Day-2 commands for static agents: `agent list` with its STATE column, `agent drain` and
 * `agent resume`, `agent token list` and `agent token revoke`, each driven through the real
 * kici-admin against a real orchestrator and real static agent processes.
 */

interface AgentRow {
  id: string;
  kind: string;
  state: string;
  jobId: string | null;
  drainedByOperator: boolean;
  tokenId: string | null;
}
interface TokenRow {
  id: string;
  agentId: string;
  labels: string[];
  kind: string;
  state: string;
  lastUsedAt: string | null;
}

let t: TestOrchestrator | undefined;
const agents: ReturnType<typeof runNode>[] = [];
const tagged = useTaggedJobs();
const gates: Awaited<ReturnType<typeof jobGate>>[] = [];
afterEach(async () => {
  for (const a of agents.splice(0)) if (a.child.pid && alive(a.child.pid)) a.child.kill('SIGKILL');
  await t?.stop();
  t = undefined;
  for (const g of gates.splice(0)) await g.close();
});

/** A gate for a job step to wait on (see jobGate), removed after the test. */
async function gate() {
  const g = await jobGate();
  gates.push(g);
  return g;
}

function admin(args: string[]) {
  return runNode([ADMIN_BIN, ...args], {
    KICI_SERVER_URL: t!.orch.url,
    KICI_ADMIN_TOKEN: t!.orch.adminToken,
  }).exited;
}

async function adminJson<T>(args: string[]): Promise<T> {
  const r = await admin([...args, '--json']);
  expect(r.stderr).toBe('');
  expect(r.code).toBe(0);
  return JSON.parse(r.stdout) as T;
}

/** Mint a token with the CLI and start a static agent holding it. */
async function startAgent(id: string, labels = 'linux,day2') {
  const tok = await adminJson<{ token: string; tokenId: string }>([
    'agent',
    'token',
    'create',
    '--labels',
    labels,
    '--id',
    id,
  ]);
  expect(tok.tokenId).toMatch(/^tok-/);
  const agent = runNode([AGENT_BIN], {
    KICI_ORCHESTRATOR_URL: t!.orch.wsUrl,
    KICI_AGENT_ID: id,
    KICI_AGENT_TOKEN: tok.token,
    KICI_LABELS: labels,
  });
  agents.push(agent);
  await agentState(id, 'idle');
  return { agent, ...tok };
}

async function listAgents(): Promise<AgentRow[]> {
  return (await t!.api<{ agents: AgentRow[] }>('GET', '/api/v1/agents')).body.agents;
}

function agentState(id: string, state: string, timeoutMs = 15_000) {
  return eventually(
    async () => (await listAgents()).find((a) => a.id === id && a.state === state),
    timeoutMs,
    `agent ${id} ${state}`,
  );
}

/** The table row for one agent, split on runs of spaces. */
function row(stdout: string, first: string): string[] | undefined {
  return stdout
    .split('\n')
    .map((l) => l.split(/\s{2,}/))
    .find((cells) => cells[0] === first);
}

describe('kici-admin agent list: the STATE column', () => {
  it('idle, then busy with its job, in table and --json form', async () => {
    t = await startTestOrchestrator();
    await startAgent('day2-list');
    const idle = await admin(['agent', 'list']);
    expect(idle.code).toBe(0);
    expect(idle.stdout.split('\n')[0]).toMatch(
      /^AGENT\s+KIND\s+STATE\s+JOB\s+SCALER\s+BACKEND\s+HOST\s+VERSION\s+UP\s+IDLE\s+LABELS$/,
    );
    expect(row(idle.stdout, 'day2-list')?.slice(0, 4)).toEqual(['day2-list', 'static', 'idle', '-']);

    const g = await gate();
    const [id] = await submit(t, { slow: { runsOn: ['day2'], steps: [{ run: `echo working; ${g.wait}` }] } });
    await waitForLine(t, id!, /^working$/);
    expect(row((await admin(['agent', 'list'])).stdout, 'day2-list')?.slice(0, 4)).toEqual([
      'day2-list',
      'static',
      'busy',
      id,
    ]);
    const json = await adminJson<AgentRow[]>(['agent', 'list']);
    expect(json).toEqual([expect.objectContaining({ id: 'day2-list', state: 'busy', jobId: id })]);
    await g.open();
    expect((await t.waitForJob(id!)).state).toBe('succeeded');
  });

  it('a static agent that dropped mid-job is listed as disconnected, with its job, for the grace period', async () => {
    // Long enough for two kici-admin runs on a loaded host; the test then skips the rest of it.
    const clock = new SkipClock();
    t = await startTestOrchestrator({ reconnectGraceMs: 15_000, clock });
    const { agent } = await startAgent('day2-gone');
    const { job } = tagged.job([{ run: 'echo working; sleep 1000' }], { runsOn: ['day2'] });
    const [id] = await submit(t, { long: job });
    await waitForLine(t, id!, /^working$/);
    agent.child.kill('SIGKILL');
    await agentState('day2-gone', 'disconnected');
    const table = await admin(['agent', 'list']);
    expect(row(table.stdout, 'day2-gone')?.slice(0, 4)).toEqual(['day2-gone', 'static', 'disconnected', id]);
    expect(row(table.stdout, 'day2-gone')?.[8]).toMatch(/^gone /);
    const json = await adminJson<AgentRow[]>(['agent', 'list']);
    expect(json).toEqual([expect.objectContaining({ id: 'day2-gone', state: 'disconnected', jobId: id })]);
    // Once the grace is over the job is settled and the agent is no longer listed.
    clock.fastForward(15_000);
    const done = await t.waitForJob(id!, undefined, 60_000);
    expect(done.state).toBe('failed');
    await eventually(async () => (await listAgents()).length === 0, 5_000, 'agent forgotten');
  });
});

describe('kici-admin agent drain / resume', () => {
  it('drain: the running job finishes, the next one waits; resume: it runs', async () => {
    t = await startTestOrchestrator();
    const { agent } = await startAgent('day2-drain');
    const g = await gate();
    const [first] = await submit(t, {
      first: { runsOn: ['day2'], steps: [{ run: `echo working; ${g.wait}; echo done` }] },
    });
    await waitForLine(t, first!, /^working$/);
    const drained = await admin(['agent', 'drain', 'day2-drain']);
    expect(drained).toMatchObject({ code: 0, stderr: '' });
    expect(drained.stdout).toBe(`agent day2-drain: draining (finishing job ${first})\n`);
    const [second] = await submit(t, { second: { runsOn: ['day2'], steps: [{ run: 'echo second' }] } });
    await g.open();
    expect((await t.waitForJob(first!)).state).toBe('succeeded');
    // Drained, not gone: the agent stays connected and takes nothing.
    await new Promise((r) => setTimeout(r, 1_500));
    expect((await t.api<{ state: string }>('GET', `/api/v1/jobs/${second}`)).body.state).toBe('queued');
    expect(row((await admin(['agent', 'list'])).stdout, 'day2-drain')?.slice(0, 4)).toEqual([
      'day2-drain',
      'static',
      'draining',
      '-',
    ]);
    expect(alive(agent.child.pid!)).toBe(true);
    // Draining again is harmless, and --json gives the agent.
    expect(await adminJson<AgentRow>(['agent', 'drain', 'day2-drain'])).toMatchObject({
      id: 'day2-drain',
      state: 'draining',
      drainedByOperator: true,
    });

    const resumed = await adminJson<AgentRow>(['agent', 'resume', 'day2-drain']);
    expect(resumed).toMatchObject({ id: 'day2-drain', drainedByOperator: false });
    const done = await t.waitForJob(second!, undefined, 15_000);
    expect(done).toMatchObject({ state: 'succeeded', agentId: 'day2-drain' });
    expect((await admin(['agent', 'resume', 'day2-drain'])).stdout).toBe('agent day2-drain: idle\n');
  });

  it('resume does not undo an agent draining itself on SIGTERM', async () => {
    t = await startTestOrchestrator();
    const { agent } = await startAgent('day2-self');
    const g = await gate();
    const [id] = await submit(t, {
      slow: { runsOn: ['day2'], steps: [{ run: `echo working; ${g.wait}` }] },
    });
    await waitForLine(t, id!, /^working$/);
    agent.child.kill('SIGTERM');
    await agentState('day2-self', 'draining');
    const r = await admin(['agent', 'resume', 'day2-self']);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/agent day2-self is draining on its own/);
    const [later] = await submit(t, { later: { runsOn: ['day2'], steps: [{ run: 'echo later' }] } });
    await g.open();
    expect((await t.waitForJob(id!)).state).toBe('succeeded');
    expect((await agent.exited).code).toBe(0);
    expect((await t.api<{ state: string }>('GET', `/api/v1/jobs/${later}`)).body.state).toBe('queued');
  });

  it('an unknown or malformed agent id: exit 1 naming it; the API answers 404 and 400', async () => {
    t = await startTestOrchestrator();
    for (const verb of ['drain', 'resume']) {
      const r = await admin(['agent', verb, 'no-such-agent']);
      expect(r.code).toBe(1);
      expect(r.stderr).toBe('Error: agent no-such-agent does not exist\n');
      expect((await t.api('POST', `/api/v1/agents/no-such-agent/${verb}`)).status).toBe(404);
      const bad = await t.api<{ problems: string[] }>('POST', `/api/v1/agents/bad%20id/${verb}`);
      expect(bad.status).toBe(400);
      expect(bad.body.problems[0]).toMatch(/^id: /);
    }
  });
});

describe('kici-admin agent token list / revoke', () => {
  it('list shows ids, agents, labels and last use, never the secret; revoke drops the agent with 4401', async () => {
    t = await startTestOrchestrator();
    const a = await startAgent('day2-tok-a');
    const spare = await adminJson<{ token: string; tokenId: string }>([
      'agent',
      'token',
      'create',
      '--labels',
      'linux',
      '--id',
      'day2-tok-b',
      '--ttl',
      '3600',
    ]);
    const table = await admin(['agent', 'token', 'list']);
    expect(table.code).toBe(0);
    expect(table.stdout.split('\n')[0]).toMatch(
      /^TOKEN\s+AGENT\s+KIND\s+STATE\s+CREATED\s+EXPIRES\s+LAST USED\s+LABELS$/,
    );
    expect(row(table.stdout, a.tokenId)?.slice(0, 4)).toEqual([a.tokenId, 'day2-tok-a', 'static', 'active']);
    expect(row(table.stdout, a.tokenId)?.[6]).toMatch(/ ago$/);
    expect(row(table.stdout, spare.tokenId)?.[6]).toBe('never');
    const json = await adminJson<TokenRow[]>(['agent', 'token', 'list']);
    expect(json.map((x) => x.id).sort()).toEqual([a.tokenId, spare.tokenId].sort());
    expect(json.find((x) => x.id === a.tokenId)).toMatchObject({
      agentId: 'day2-tok-a',
      labels: ['linux', 'day2'],
      kind: 'static',
      state: 'active',
      lastUsedAt: expect.any(String),
    });
    for (const out of [table.stdout, JSON.stringify(json)]) {
      expect(out).not.toContain(a.token);
      expect(out).not.toContain(spare.token);
      expect(out).not.toMatch(/hash/i);
    }
    expect((await listAgents())[0]).toMatchObject({ id: 'day2-tok-a', tokenId: a.tokenId });

    const revoked = await admin(['agent', 'token', 'revoke', a.tokenId]);
    expect(revoked).toMatchObject({ code: 0, stderr: '' });
    expect(revoked.stdout).toBe(`revoked token ${a.tokenId} (agent day2-tok-a); disconnected day2-tok-a\n`);
    const exit = await a.agent.exited;
    expect(exit.code).toBe(2);
    expect(exit.stderr).toMatch(/refused this agent \(4401\): token revoked/);
    // Gone for good: not listed as disconnected, and the token no longer lets it in.
    expect(await listAgents()).toEqual([]);
    const again = runNode([AGENT_BIN], {
      KICI_ORCHESTRATOR_URL: t.orch.wsUrl,
      KICI_AGENT_ID: 'day2-tok-a',
      KICI_AGENT_TOKEN: a.token,
      KICI_LABELS: 'linux,day2',
    });
    agents.push(again);
    expect((await again.exited).code).toBe(2);
    expect((await adminJson<TokenRow[]>(['agent', 'token', 'list'])).map((x) => x.id)).toEqual([
      spare.tokenId,
    ]);
    const all = await adminJson<TokenRow[]>(['agent', 'token', 'list', '--all']);
    expect(all.find((x) => x.id === a.tokenId)).toMatchObject({ state: 'revoked' });
    // Revoking twice is harmless; --json gives the token.
    expect(await adminJson<TokenRow>(['agent', 'token', 'revoke', a.tokenId])).toMatchObject({
      id: a.tokenId,
      state: 'revoked',
      disconnected: [],
    });
  });

  it('revoking the token of a busy agent stops its job at once and leaves no step process', async () => {
    t = await startTestOrchestrator();
    const a = await startAgent('day2-busy');
    const { tag, job } = tagged.job([{ run: 'echo working; sleep 1000' }], { runsOn: ['day2'] });
    const [id] = await submit(t, { long: job });
    await waitForLine(t, id!, /^working$/);
    expect((await admin(['agent', 'token', 'revoke', a.tokenId])).code).toBe(0);
    const done = await t.waitForJob(id!, undefined, 5_000);
    expect(done.state).toBe('failed');
    expect(done.reason).toMatch(/token of agent day2-busy was revoked/);
    expect((await a.agent.exited).code).toBe(2);
    expect(await tagged.alive(tag)).toBe(0);
  });

  it('an unknown or malformed token id: exit 1 naming it; the API answers 404 and 400', async () => {
    t = await startTestOrchestrator();
    const r = await admin(['agent', 'token', 'revoke', 'tok-nope']);
    expect(r.code).toBe(1);
    expect(r.stderr).toBe('Error: token tok-nope does not exist\n');
    expect((await t.api('DELETE', '/api/v1/agents/tokens/tok-nope')).status).toBe(404);
    const bad = await t.api<{ problems: string[] }>('DELETE', '/api/v1/agents/tokens/..%2F');
    expect(bad.status).toBe(400);
    expect(bad.body.problems[0]).toMatch(/^id: /);
    const list = await t.api<{ problems: string[] }>('GET', '/api/v1/agents/tokens?all=yes');
    expect(list.status).toBe(400);
    expect(list.body.problems).toEqual(['all: true or false']);
  });
});
