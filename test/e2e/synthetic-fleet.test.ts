import { afterEach, describe, expect, it } from 'vitest';
import { SyntheticFleet } from '../../bench/fleet/fleet.ts';
import {
  AGENT_BIN,
  alive,
  eventually,
  runNode,
  startTestOrchestrator,
  type TestOrchestrator,
} from '../helpers/orchestrator.js';

/**
 * The benchmarks' synthetic fleet must be judged by the orchestrator exactly as a real `kici-agent`
 * is, or its figures say nothing about real agents: same registration, same dispatch, same result.
 */
let t: TestOrchestrator | undefined;
let fleet: SyntheticFleet | undefined;
const children: { child: { pid?: number; kill(sig?: NodeJS.Signals): boolean } }[] = [];
afterEach(async () => {
  for (const c of children.splice(0)) if (c.child.pid && alive(c.child.pid)) c.child.kill('SIGKILL');
  await fleet?.stop();
  fleet = undefined;
  await t?.stop();
  t = undefined;
});

interface AgentView {
  id: string;
  kind: string;
  state: string;
  labels: string[];
  jobsDone?: number;
}

/** What the orchestrator stores and says about one agent and the one job it ran. */
async function trail(t: TestOrchestrator, agentId: string, label: string, events: string[]) {
  const run = await t.api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
    jobs: { only: { runsOn: ['linux', label], steps: [{ name: 'one', run: 'echo synthetic one' }] } },
  });
  const jobId = run.body.jobs[0]!.id;
  const job = await t.waitForJob(jobId);
  const body = (await t.api<Record<string, unknown>>('GET', `/api/v1/jobs/${jobId}`)).body;
  const logs = await t.api<{ lines: { step: number | null; stream: string }[] }>(
    'GET',
    `/api/v1/jobs/${jobId}/logs`,
  );
  // The result is acknowledged to the agent once stored; its agent is listed idle again.
  const agent = await eventually(async () => {
    const list = await t.api<{ agents: AgentView[] }>('GET', '/api/v1/agents');
    const a = list.body.agents.find((x) => x.id === agentId);
    return a?.state === 'idle' && a;
  });
  const stepRows = (body.steps as { idx: number; name: string; exitCode: number | null }[]).map(
    ({ idx, name, exitCode }) => ({ idx, name, exitCode }),
  );
  return {
    job: {
      state: job.state,
      exitCode: job.exitCode,
      reason: job.reason,
      agentId: job.agentId === agentId,
      started: job.startedAt !== null,
      steps: stepRows,
      logStreams: [...new Set(logs.body.lines.map((l) => `${l.step}:${l.stream}`))],
    },
    agent: {
      kind: agent.kind,
      state: agent.state,
      // The real agent adds its host's facts (kici:os:…); the labels its token grants are the same.
      labels: agent.labels.filter((l) => !l.startsWith('kici:')).map((l) => (l === label ? 'L' : l)),
    },
    events: events.filter((e) => e.includes(agentId) || e.includes(jobId)).map((e) => e.split(' ')[0]),
  };
}

describe('the synthetic fleet', () => {
  it('is treated like a real kici-agent: registration, dispatch and result', async () => {
    t = await startTestOrchestrator();
    const events: string[] = [];
    t.orch.events.on('agent.registered', (e) => events.push(`registered ${e.agentId}`));
    t.orch.events.on('job.started', (e) => events.push(`started ${e.jobId} ${e.agentId}`));
    t.orch.events.on('job.settled', (e) => events.push(`settled:${e.state} ${e.jobId}`));
    const mint = (agentId: string, label: string) =>
      t!.api<{ token: string }>('POST', '/api/v1/agents/tokens', { labels: ['linux', label], agentId });

    const realTok = await mint('real-1', 'eq-real');
    const real = runNode([AGENT_BIN], {
      KICI_ORCHESTRATOR_URL: t.orch.wsUrl,
      KICI_AGENT_ID: 'real-1',
      KICI_AGENT_TOKEN: realTok.body.token,
      KICI_LABELS: 'linux,eq-real',
    });
    children.push(real);
    await eventually(() => events.includes('registered real-1'));
    const realTrail = await trail(t, 'real-1', 'eq-real', events);

    const fleetTok = await mint('synthetic-1', 'eq-fleet');
    fleet = new SyntheticFleet(
      [{ agentId: 'synthetic-1', token: fleetTok.body.token, labels: ['linux', 'eq-fleet'] }],
      {
        url: t.orch.wsUrl,
      },
    );
    await fleet.start();
    const fleetTrail = await trail(t, 'synthetic-1', 'eq-fleet', events);

    expect(realTrail.job.state).toBe('succeeded');
    expect(fleetTrail).toEqual(realTrail);
    expect(fleetTrail.events).toEqual(['registered', 'started', 'settled:succeeded']);
    // The fleet heard what a real agent hears, in the same order.
    expect(fleet.agents[0]!.seen).toEqual(['register.ack', 'job.assign', 'job.finished.ack']);
  });

  it('registers many sessions and spreads a burst over them', async () => {
    t = await startTestOrchestrator();
    const specs = [];
    for (let i = 0; i < 40; i++) {
      const agentId = `many-${i}`;
      const tok = await t.api<{ token: string }>('POST', '/api/v1/agents/tokens', {
        labels: ['linux', 'many'],
        agentId,
      });
      specs.push({ agentId, token: tok.body.token, labels: ['linux', 'many'] });
    }
    // More at once than the orchestrator admits unregistered from one address: the fleet retries.
    fleet = new SyntheticFleet(specs, { url: t.orch.wsUrl, concurrency: 40, stepMs: 5 });
    await fleet.start();
    const list = await t.api<{ agents: AgentView[] }>('GET', '/api/v1/agents');
    expect(list.body.agents.filter((a) => a.id.startsWith('many-'))).toHaveLength(40);
    const jobs = Object.fromEntries(
      Array.from({ length: 80 }, (_, i) => [`j${i}`, { runsOn: ['linux', 'many'], steps: [{ run: 'x' }] }]),
    );
    const run = await t.api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', { jobs });
    const done = await Promise.all(run.body.jobs.map((j) => t!.waitForJob(j.id)));
    expect(done.every((j) => j.state === 'succeeded')).toBe(true);
    expect(fleet.agents.reduce((n, a) => n + a.jobsDone, 0)).toBe(80);
    expect(new Set(done.map((j) => j.agentId)).size).toBeGreaterThan(1);
  });
});
