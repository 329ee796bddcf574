/**
 * The agent session over a real WebSocket: a claim-code agent process claims, registers and runs
 * a job; a reused code is refused; a refused `scaler-` agent's compute is reclaimed; and a scaler
 * agent's own output reaches its job's log and the orchestrator's log at info.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { WebSocket } from 'ws';
import { afterEach, describe, expect, it } from 'vitest';
import { MemoryClaimStore } from '../helpers/claim-store.js';
import {
  AGENT_BIN,
  alive,
  bareMetalConfig,
  eventually,
  NODE,
  runNode,
  startTestOrchestrator,
  type TestOrchestrator,
} from '../helpers/orchestrator.js';

let t: TestOrchestrator | undefined;
const children: ChildProcess[] = [];
afterEach(async () => {
  for (const c of children.splice(0)) {
    for (const pid of c.pid ? [-c.pid, c.pid] : []) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // not a group leader, or already gone
      }
    }
  }
  await t?.stop();
  t = undefined;
});

describe('claim codes', () => {
  it('an agent started with KICI_SCALER_CLAIM_CODE claims, registers and runs a job; the code is single-use', async () => {
    const claims = new MemoryClaimStore();
    t = await startTestOrchestrator({ claimStore: claims });
    claims.store = t.orch.store;
    claims.add('claim-0123456789', {
      agentId: 'claimed-agent-1',
      labels: ['linux', 'claimed'],
      expiresAtMs: Date.now() + 60_000,
    });
    const env = {
      KICI_ORCHESTRATOR_URL: t.orch.wsUrl,
      KICI_SCALER_CLAIM_CODE: 'claim-0123456789',
      KICI_EPHEMERAL: '1',
    };
    const agent = runNode([AGENT_BIN], env);
    children.push(agent.child);
    // Without a scaler, a job no connected agent can take is settled as no-backend at once.
    await eventually(() => t!.orch.dispatcher.registry.get('claimed-agent-1'), 10_000, 'the claimed agent');
    const run = await t.api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
      jobs: { a: { runsOn: ['claimed'], steps: [{ run: 'echo claimed-ok' }] } },
    });
    const job = await t.waitForJob(run.body.jobs[0]!.id, undefined, 20_000);
    expect(job.state).toBe('succeeded');
    expect(job.agentId).toBe('claimed-agent-1');
    expect((await agent.exited).code).toBe(0);
    expect(claims.redeemed).toBe(1);

    const again = runNode([AGENT_BIN], env);
    children.push(again.child);
    const out = await again.exited;
    expect(out.code).toBe(2);
    expect(out.stderr).toMatch(/4401.*claim code already used/);
  });

  it('an unknown claim code is refused with 4401 by the default (store) claim store', async () => {
    t = await startTestOrchestrator();
    const ws = new WebSocket(t.orch.wsUrl);
    const messages: { type: string; reason?: string }[] = [];
    ws.on('open', () => ws.send(JSON.stringify({ type: 'claim', protocol: 1, code: 'anything' })));
    ws.on('message', (d) => messages.push(JSON.parse(String(d))));
    const [code, reason] = await new Promise<[number, string]>((r) =>
      ws.on('close', (c, why) => r([c, String(why)])),
    );
    expect(code).toBe(4401);
    expect(reason).toMatch(/claim refused: invalid claim code/);
    expect(messages[0]).toMatchObject({ type: 'register.rejected', code: 4401 });
  });
});

describe('a refused scaler- id', () => {
  it('is refused with 4403 and its compute is reclaimed', async () => {
    t = await startTestOrchestrator({ config: bareMetalConfig() });
    const agentId = 'scaler-bare-metal-0badf00d';
    const labels = ['linux', 'small', 'kici:agent:bare-metal', 'kici:scaler:bm'];
    const { token } = await t.orch.store.tokens.mint({ agentId, labels, kind: 'ephemeral', now: new Date() });
    // Compute that outlives the agent process (a wrapper that keeps running), as a VM or container would.
    const shell = spawn(
      '/bin/sh',
      ['-c', `"${NODE}" "${AGENT_BIN}"; echo "agent exited $?"; exec sleep 60`],
      {
        detached: true,
        stdio: ['ignore', 'pipe', 'pipe'],
        env: {
          ...process.env,
          KICI_ORCHESTRATOR_URL: t.orch.wsUrl,
          KICI_AGENT_ID: agentId,
          KICI_AGENT_TOKEN: token,
          KICI_LABELS: labels.join(','),
          KICI_SCALER_MANAGED: '1',
        },
      },
    );
    children.push(shell);
    let out = '';
    shell.stdout!.on('data', (d) => (out += String(d)));
    shell.stderr!.on('data', (d) => (out += String(d)));
    // The refusal names its code and reason in one line. The close that follows may never be logged:
    // the compute is reclaimed at once, and the agent can be stopped before it reads the close.
    await eventually(
      () => /registration refused \(4403\): no spawn record/.test(out),
      10_000,
      'the agent to be refused with 4403, naming the missing spawn record',
    );
    await eventually(() => !alive(shell.pid!), 10_000, 'the refused agent compute to be reclaimed');
    expect(t.orch.scaler!.entries()).toHaveLength(0);
  });
});

describe('agent output', () => {
  it("reaches the bound job's log as system lines and the orchestrator's log at info", async () => {
    const lines: { level: number; msg: string; agentId?: string; line?: string; agentMsg?: string }[] = [];
    const sink = new Writable({
      write(chunk, _enc, done) {
        for (const l of String(chunk).split('\n')) if (l) lines.push(JSON.parse(l));
        done();
      },
    });
    t = await startTestOrchestrator({ config: bareMetalConfig(), logger: pino({ level: 'info' }, sink) });
    const run = await t.api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
      jobs: { a: { runsOn: ['linux', 'small'], steps: [{ run: 'true' }] } },
    });
    const id = run.body.jobs[0]!.id;
    const job = await t.waitForJob(id, undefined, 20_000);
    expect(job.state).toBe('succeeded');
    const logs = await t.api<{ lines: { stream: string; line: string }[] }>('GET', `/api/v1/jobs/${id}/logs`);
    const own = logs.body.lines.filter((l) => l.stream === 'system' && l.line.startsWith('agent.output:'));
    expect(own.some((l) => l.line.includes(`registered as ${job.agentId}`))).toBe(true);
    const info = lines.filter((l) => l.msg === 'agent output' && l.agentId === job.agentId);
    expect(info.length).toBeGreaterThan(0);
    expect(info.every((l) => l.level === 30)).toBe(true);
    // The agent's own JSON record arrives as fields of ours, not as a string holding JSON.
    expect(info.some((l) => l.agentMsg === `registered as ${job.agentId}` && l.line === undefined)).toBe(
      true,
    );
  });
});
