/**
 * A job step that turns on its own agent: it looks for the agent's token where a process can read
 * another's secrets (its parent's /proc entries, the files it can reach) and, holding a token,
 * registers as that agent with the raw protocol, claiming it has run nothing. It must neither find
 * the token of a backend-started agent, nor replace any agent, nor be handed the next job.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import {
  AGENT_BIN,
  alive,
  bareMetalConfig,
  eventually,
  runNode,
  startTestOrchestrator,
  type TestOrchestrator,
} from '../../helpers/orchestrator.js';
import { logSink, THIEF_STEP, thiefEnv, TOKEN_RE } from '../../helpers/takeover.js';
import { TcpProxy } from '../../helpers/tcp-proxy.js';

let t: TestOrchestrator | undefined;
const children: { pid?: number | undefined; kill(sig?: NodeJS.Signals): boolean }[] = [];
const dirs: string[] = [];
const proxies: TcpProxy[] = [];
afterEach(async () => {
  for (const c of children.splice(0)) if (c.pid && alive(c.pid)) c.kill('SIGKILL');
  for (const p of proxies.splice(0)) await p.shut();
  await t?.stop();
  t = undefined;
  for (const d of dirs.splice(0)) await rm(d, { recursive: true, force: true });
});

async function logsOf(t: TestOrchestrator, jobId: string): Promise<string[]> {
  const r = await t.api<{ lines: { line: string }[] }>('GET', `/api/v1/jobs/${jobId}/logs`);
  return r.body.lines.map((l) => l.line);
}

describe('a job step cannot take over its agent', () => {
  it('bare-metal: the step finds no token, and the next job runs on a real agent with its true result', async () => {
    const log = logSink();
    // Unsealed (a root test's agent is anyway): the handoff alone must keep the token out of reach,
    // and the step's view of its agent proves it looked at the real one. Sealing has its own test.
    const labelSets = ['small', 'large'].map((s) => ({
      labels: ['linux', s],
      binaryPath: AGENT_BIN,
      env: { KICI_AGENT_SEAL: 'off' },
    }));
    t = await startTestOrchestrator({
      config: bareMetalConfig({ maxAgents: 1 }, labelSets),
      logger: log.logger,
    });
    const run = await t.api<{ jobs: { id: string; name: string }[] }>('POST', '/api/v1/runs', {
      jobs: {
        thief: {
          runsOn: ['linux', 'small'],
          env: thiefEnv(t.orch.wsUrl),
          steps: [{ run: THIEF_STEP }],
        },
      },
    });
    const thief = await t.waitForJob(run.body.jobs[0]!.id, undefined, 30_000);
    const thiefLog = await logsOf(t, thief.id);
    expect(thiefLog).toContainEqual(expect.stringMatching(/^thief saw: agent-env=1 fds=[1-9]/));
    expect(thiefLog).toContain('thief found: nothing');
    expect(thiefLog.join('\n')).not.toMatch(TOKEN_RE);
    expect(thiefLog).toContain('attack closed 4401');
    const victimRun = await t.api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
      jobs: { victim: { runsOn: ['linux', 'small'], env: { DEPLOY_KEY: 'k' }, steps: [{ run: 'exit 3' }] } },
    });
    const victim = await t.waitForJob(victimRun.body.jobs[0]!.id, undefined, 30_000);
    expect(victim.state).toBe('failed');
    expect(victim.exitCode).toBe(3);
    expect(victim.agentId).toMatch(/^scaler-bare-metal-/);
    expect(victim.agentId).not.toBe(thief.agentId);
    // The orchestrator's log never carries a token.
    expect(log.raw.join('\n')).not.toMatch(TOKEN_RE);
  });

  it('a static agent whose token the step can read: the step is refused (4412, logged), the agent keeps the next job', async () => {
    const log = logSink();
    t = await startTestOrchestrator({ logger: log.logger });
    const tok = await t.api<{ token: string }>('POST', '/api/v1/agents/tokens', {
      agentId: 'static-victim',
      labels: ['pool-x'],
    });
    // An operator's agent with the token in its environment: readable in /proc/<pid>/environ.
    const agent = runNode([AGENT_BIN], {
      KICI_ORCHESTRATOR_URL: t.orch.wsUrl,
      KICI_AGENT_ID: 'static-victim',
      KICI_AGENT_TOKEN: tok.body.token,
      KICI_LABELS: 'pool-x',
      // Sealed, the agent would hide even this environment from its steps (a root test's is not).
      KICI_AGENT_SEAL: 'off',
    });
    children.push(agent.child);
    await eventually(() => t!.orch.dispatcher.registry.get('static-victim'), 10_000, 'the static agent');
    const real = t.orch.dispatcher.registry.get('static-victim');
    const run = await t.api<{ jobs: { id: string; name: string }[] }>('POST', '/api/v1/runs', {
      jobs: {
        thief: {
          runsOn: ['pool-x'],
          env: thiefEnv(t.orch.wsUrl),
          steps: [{ run: THIEF_STEP }],
        },
        victim: { runsOn: ['pool-x'], env: { DEPLOY_KEY: 'k' }, steps: [{ run: 'echo victim ran; exit 3' }] },
      },
    });
    const byName = Object.fromEntries(run.body.jobs.map((j) => [j.name, j.id]));
    const thief = await t.waitForJob(byName.thief!, undefined, 30_000);
    const thiefLog = await logsOf(t, thief.id);
    expect(thiefLog.some((l) => TOKEN_RE.test(l))).toBe(true); // the operator's choice made it readable
    expect(thiefLog).toContain('attack got register.rejected');
    expect(thiefLog).toContain('attack closed 4412');
    const victim = await t.waitForJob(byName.victim!, undefined, 30_000);
    expect(victim.state).toBe('failed');
    expect(victim.exitCode).toBe(3);
    expect(victim.agentId).toBe('static-victim');
    expect(await logsOf(t, victim.id)).toContain('victim ran');
    // Never replaced: the first connection still holds the agent id.
    expect(t.orch.dispatcher.registry.get('static-victim')).toBe(real);
    const security = log.lines.filter((l) => l.securityEvent === 'agent-session-unproven');
    expect(security).toEqual([expect.objectContaining({ agentId: 'static-victim', level: 40 })]);
    // The security event names the agent, never a secret.
    expect(log.raw.join('\n')).not.toContain(tok.body.token);
  });

  it('a static agent given its token in a file: the file is gone, the step finds nothing, and a dropped link resumes the job', async () => {
    t = await startTestOrchestrator();
    const dir = await mkdtemp(join(tmpdir(), 'kici-takeover-'));
    dirs.push(dir);
    const tok = await t.api<{ token: string }>('POST', '/api/v1/agents/tokens', {
      agentId: 'filed-agent',
      labels: ['pool-y'],
    });
    const tokenFile = join(dir, 'token');
    await writeFile(tokenFile, tok.body.token + '\n', { mode: 0o600 });
    const proxy = new TcpProxy('127.0.0.1', Number(new URL(t.orch.wsUrl).port));
    proxies.push(proxy);
    await proxy.open();
    const agent = runNode([AGENT_BIN], {
      KICI_ORCHESTRATOR_URL: proxy.urlFor(t.orch.wsUrl),
      KICI_AGENT_ID: 'filed-agent',
      KICI_AGENT_TOKEN_FILE: tokenFile,
      KICI_LABELS: 'pool-y',
      KICI_AGENT_SEAL: 'off',
    });
    children.push(agent.child);
    await eventually(() => t!.orch.dispatcher.registry.get('filed-agent'), 10_000, 'the agent');
    expect(existsSync(tokenFile)).toBe(false);
    const mark = join(dir, 'go-on');
    const run = await t.api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
      jobs: {
        a: {
          runsOn: ['pool-y'],
          env: { ...thiefEnv(t.orch.wsUrl), MARK: mark },
          steps: [
            { run: THIEF_STEP },
            { run: 'echo waiting; while [ ! -e "$MARK" ]; do sleep 0.05; done; echo resumed; exit 3' },
          ],
        },
      },
    });
    const jobId = run.body.jobs[0]!.id;
    await eventually(async () => (await logsOf(t!, jobId)).includes('waiting'), 20_000, 'the second step');
    const before = t.orch.dispatcher.registry.get('filed-agent');
    // Cut the agent's link mid-job; it comes back with its session proof and keeps the job.
    await proxy.shut();
    await proxy.open();
    await eventually(
      () => {
        const now = t!.orch.dispatcher.registry.get('filed-agent');
        return now !== undefined && now !== before;
      },
      20_000,
      'the agent to reconnect',
    );
    await writeFile(mark, '');
    const job = await t.waitForJob(jobId, undefined, 20_000);
    const lines = await logsOf(t, jobId);
    expect(lines).toContainEqual(expect.stringMatching(/^thief saw: agent-env=1 fds=[1-9]/));
    expect(lines).toContain('thief found: nothing');
    expect(lines).toContain('attack closed 4401');
    expect(lines).toContain('resumed');
    expect(job.state).toBe('failed');
    expect(job.exitCode).toBe(3);
    expect(job.agentId).toBe('filed-agent');
  });
});
