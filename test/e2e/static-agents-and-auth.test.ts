import { WebSocket } from 'ws';
import { afterEach, describe, expect, it } from 'vitest';
import {
  AGENT_BIN,
  alive,
  eventually,
  runNode,
  startTestOrchestrator,
  type TestOrchestrator,
} from '../helpers/orchestrator.js';

let t: TestOrchestrator | undefined;
const children: { child: { pid?: number; kill(sig?: NodeJS.Signals): boolean } }[] = [];
afterEach(async () => {
  for (const c of children.splice(0)) if (c.child.pid && alive(c.child.pid)) c.child.kill('SIGKILL');
  await t?.stop();
  t = undefined;
});

async function mintToken(t: TestOrchestrator, body: Record<string, unknown>) {
  return t.api<{ agentId: string; token: string; labels: string[] }>('POST', '/api/v1/agents/tokens', body);
}

/** Open a raw agent socket, send one register message, and return how the orchestrator answered. */
function registerRaw(url: string, msg: Record<string, unknown>) {
  return new Promise<{
    messages: { type: string; reason?: string }[];
    closeCode: number;
    closeReason: string;
  }>((resolve) => {
    const ws = new WebSocket(url);
    const messages: { type: string; reason?: string }[] = [];
    ws.on('open', () => ws.send(JSON.stringify({ type: 'register', protocol: 1, labels: [], ...msg })));
    ws.on('message', (d) => {
      const m = JSON.parse(String(d));
      messages.push(m);
      if (m.type === 'register.ack') ws.close(1000);
    });
    ws.on('close', (code, reason) => resolve({ messages, closeCode: code, closeReason: String(reason) }));
  });
}

describe('static agents and agent authentication', () => {
  it('a static agent with a long-lived token takes jobs and stays for more', async () => {
    t = await startTestOrchestrator();
    const tok = await mintToken(t, { labels: ['linux', 'Static-Pool'], agentId: 'builder-1' });
    expect(tok.status).toBe(201);
    expect(tok.body.labels).toEqual(['linux', 'static-pool']);
    const agent = runNode([AGENT_BIN], {
      KICI_ORCHESTRATOR_URL: t.orch.wsUrl,
      KICI_AGENT_ID: 'builder-1',
      KICI_AGENT_TOKEN: tok.body.token,
      KICI_LABELS: 'linux,static-pool',
    });
    children.push(agent);
    const run = await t.api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
      jobs: {
        a: { runsOn: ['LINUX', 'static-pool'], steps: [{ run: 'echo a' }] },
        b: { runsOn: ['static-pool'], steps: [{ run: 'echo b; exit 3' }] },
      },
    });
    const [a, b] = await Promise.all(run.body.jobs.map((j) => t!.waitForJob(j.id)));
    expect(a!.state).toBe('succeeded');
    expect(a!.agentId).toBe('builder-1');
    expect(b!.state).toBe('failed');
    expect(b!.exitCode).toBe(3);
    // Still connected: static agents are not single-use.
    const agents = await t.api<{ agents: { id: string; kind: string; labels: string[] }[] }>(
      'GET',
      '/api/v1/agents',
    );
    expect(agents.body.agents).toEqual([expect.objectContaining({ id: 'builder-1', kind: 'static' })]);
    // The agent adds facts about its own host to the labels its token allows.
    const labels = agents.body.agents[0]!.labels;
    expect(labels).toEqual(
      expect.arrayContaining(['linux', 'static-pool', 'kici:os:linux', `kici:arch:${process.arch}`]),
    );
    expect(labels.some((l) => l.startsWith('kici:host:'))).toBe(true);
    expect(alive(agent.child.pid!)).toBe(true);
  });

  it('refuses bad, expired and foreign tokens, out-of-scope labels and unknown scaler ids, with reasons', async () => {
    t = await startTestOrchestrator();
    const url = t.orch.wsUrl;
    const bad = await registerRaw(url, { agentId: 'x', token: 'kici_nope' });
    expect(bad.closeCode).toBe(4401);
    expect(bad.messages[0]).toMatchObject({ type: 'register.rejected', reason: 'unknown token' });

    const tok = await mintToken(t, { labels: ['linux'], agentId: 'a1' });
    const foreign = await registerRaw(url, { agentId: 'a2', token: tok.body.token, labels: ['linux'] });
    expect(foreign.closeCode).toBe(4401);
    expect(foreign.closeReason).toMatch(/not valid for agent id "a2"/);

    const scope = await registerRaw(url, {
      agentId: 'a1',
      token: tok.body.token,
      labels: ['linux', 'gpu', 'kici:os:linux'],
    });
    expect(scope.closeCode).toBe(4403);
    expect(scope.closeReason).toMatch(/outside the token's scope: gpu/);

    const ok = await registerRaw(url, {
      agentId: 'a1',
      token: tok.body.token,
      labels: ['linux', 'kici:os:linux', 'kici:host:box'],
    });
    expect(ok.messages[0]!.type).toBe('register.ack');

    const short = await mintToken(t, { labels: ['linux'], agentId: 'a3', ttlSeconds: 1 });
    await new Promise((r) => setTimeout(r, 1100));
    const expired = await registerRaw(url, { agentId: 'a3', token: short.body.token, labels: ['linux'] });
    expect(expired.closeCode).toBe(4401);
    expect(expired.messages[0]!.reason).toBe('token expired');

    const reserved = await mintToken(t, { labels: ['linux'], agentId: 'scaler-bare-metal-12345678' });
    expect(reserved.status).toBe(400);
    expect(JSON.stringify(reserved.body)).toMatch(/agentId/);
  });

  it('an agent process refused by the orchestrator exits with a clear message', async () => {
    t = await startTestOrchestrator();
    const agent = runNode([AGENT_BIN], {
      KICI_ORCHESTRATOR_URL: t.orch.wsUrl,
      KICI_AGENT_ID: 'nobody',
      KICI_AGENT_TOKEN: 'kici_wrong',
    });
    children.push(agent);
    const res = await agent.exited;
    expect(res.code).toBe(2);
    expect(res.stderr).toMatch(/refused this agent \(4401\): unknown token/);
  });

  it('a scaler- id without a spawn record is refused even with a valid token', async () => {
    t = await startTestOrchestrator({ config: { version: 1, scalers: [] } });
    const now = new Date();
    const minted = await t.orch.store.tokens.mint({
      agentId: 'scaler-bare-metal-deadbeef',
      labels: ['linux'],
      kind: 'ephemeral',
      ttlMs: 60_000,
      now,
    });
    const res = await registerRaw(t.orch.wsUrl, {
      agentId: 'scaler-bare-metal-deadbeef',
      token: minted.token,
      labels: ['linux'],
    });
    expect(res.closeCode).toBe(4403);
    expect(res.closeReason).toMatch(/no spawn record/);
  });

  it('an agent that stops sending heartbeats is dropped', async () => {
    t = await startTestOrchestrator({ heartbeatIntervalMs: 100 });
    const tok = await mintToken(t, { labels: ['linux'], agentId: 'silent' });
    const ws = new WebSocket(t.orch.wsUrl);
    const closed = new Promise<number>((r) => ws.on('close', (code) => r(code)));
    ws.on('open', () =>
      ws.send(
        JSON.stringify({
          type: 'register',
          protocol: 1,
          agentId: 'silent',
          token: tok.body.token,
          labels: ['linux'],
        }),
      ),
    );
    expect(await closed).toBe(4408);
    await eventually(() => !t!.orch.dispatcher.registry.get('silent'), 2000, 'agent removed');
  });

  it('a static agent that reconnects keeps its running job', async () => {
    t = await startTestOrchestrator();
    const tok = await mintToken(t, { labels: ['linux'], agentId: 'flaky' });
    const env = {
      KICI_ORCHESTRATOR_URL: t.orch.wsUrl,
      KICI_AGENT_ID: 'flaky',
      KICI_AGENT_TOKEN: tok.body.token,
      KICI_LABELS: 'linux',
    };
    const agent = runNode([AGENT_BIN], env);
    children.push(agent);
    const run = await t.api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
      jobs: { j: { runsOn: ['linux'], steps: [{ run: 'sleep 1.5; echo done-after-reconnect' }] } },
    });
    const id = run.body.jobs[0]!.id;
    await t.waitForJob(id, ['running']);
    // Drop the connection from the server side; the agent reconnects and reports the result.
    t.orch.dispatcher.registry.get('flaky')!.close(1012, 'test drop');
    const job = await t.waitForJob(id);
    expect(job.state).toBe('succeeded');
    const logs = await t.api<{ lines: { line: string }[] }>('GET', `/api/v1/jobs/${id}/logs`);
    expect(logs.body.lines.map((l) => l.line)).toContain('done-after-reconnect');
    await eventually(() => t!.orch.dispatcher.registry.get('flaky'), 5000, 'agent back');
  });
});
