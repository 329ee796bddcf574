import { mkdtemp, rm } from 'node:fs/promises';
import { afterEach, describe, expect, inject, it } from 'vitest';
import { startOrchestratorAs } from '../helpers/as-user.js';
import { outputLines, submit } from '../helpers/jobs.js';
import { AGENT_BIN, startTestOrchestrator, type TestOrchestrator } from '../helpers/orchestrator.js';
import { logSink, THIEF_STEP, thiefEnv, TOKEN_RE } from '../helpers/takeover.js';

/**
 * Takeover on a confined bare-metal host: a step searches its agent (the parent's environment,
 * command line and open files, the files in reach, its own environment) for the agent's token and
 * registers as that agent claiming it has run nothing. Under each confinement (the bubblewrap
 * sandbox an unprivileged orchestrator chooses, and as root per-agent users, alone, inside the
 * sandbox, and the sandbox alone) it finds nothing, is refused (and the refusal logged), is handed
 * no job, and the job queued behind it runs on a real agent with its true result.
 */

let t: TestOrchestrator | undefined;
let stopUser: (() => Promise<void>) | undefined;
let base: string | undefined;
afterEach(async () => {
  await t?.stop();
  t = undefined;
  await stopUser?.();
  stopUser = undefined;
  if (base) await rm(base, { recursive: true, force: true });
  base = undefined;
});

type Target = Pick<TestOrchestrator, 'api' | 'waitForJob'> & { wsUrl: string };
interface Refusal {
  msg: string;
  agentId?: string;
  code?: number;
  securityEvent?: string;
}

/**
 * One scaler per label set, one agent at a time: the victim waits in the queue while the thief runs,
 * so a thief that took its agent's place would be the one handed the victim.
 */
const config = (labelSets: Record<string, unknown>[]) => ({
  version: 1,
  scalers: labelSets.map((ls, i) => ({
    name: `bm${i}`,
    type: 'bare-metal',
    maxAgents: 1,
    labelSets: [{ binaryPath: AGENT_BIN, ...ls }],
  })),
});

/** The attack and its victim on `runsOn`; checks everything but the orchestrator's log. */
async function takeover(o: Target, runsOn: string[]): Promise<{ thiefAgent: string }> {
  const [thiefId, victimId] = await submit(o, {
    thief: { runsOn, env: thiefEnv(o.wsUrl), steps: [{ run: THIEF_STEP }] },
    victim: { runsOn, env: { DEPLOY_KEY: 'k' }, steps: [{ run: 'echo victim ran; exit 3' }] },
  });
  const thief = await o.waitForJob(thiefId!, undefined, 60_000);
  const lines = await outputLines(o, thiefId!);
  const text = lines.join('\n');
  expect(thief.state, text).toBe('succeeded');
  // It looked at the real agent: the agent's environment and descriptors were in its reach.
  expect(lines, text).toContainEqual(expect.stringMatching(/^thief saw: agent-env=1 fds=[1-9]/));
  expect(lines, text).toContain('thief found: nothing');
  expect(text).not.toMatch(TOKEN_RE);
  // It reached the orchestrator, was refused for its token, and was handed nothing.
  expect(
    lines.filter((l) => l.startsWith('attack ')),
    text,
  ).toEqual(['attack got register.rejected', 'attack closed 4401']);
  const victim = await o.waitForJob(victimId!, undefined, 60_000);
  expect(victim.state).toBe('failed');
  expect(victim.exitCode).toBe(3);
  expect(victim.agentId).toMatch(/^scaler-/);
  expect(victim.agentId).not.toBe(thief.agentId);
  expect(await outputLines(o, victimId!)).toContain('victim ran');
  return { thiefAgent: thief.agentId! };
}

/** The orchestrator logged the refusal of a token that was not the agent's, and no secret. */
function expectRefusalLogged(log: Refusal[], raw: string, agentId: string): void {
  expect(log).toContainEqual(expect.objectContaining({ msg: 'agent refused', agentId, code: 4401 }));
  // A guess is no valid token: no session to prove, so no session security event.
  expect(log.filter((l) => l.securityEvent)).toEqual([]);
  expect(raw).not.toMatch(TOKEN_RE);
}

describe('a confined bare-metal step cannot take over its agent', () => {
  it('unprivileged orchestrator, the bubblewrap sandbox by default', async () => {
    base = await mkdtemp('/var/tmp/kici-sbt-');
    const u = await startOrchestratorAs(
      base,
      inject('templateDataDir'),
      config([{ labels: ['linux', 'sandboxed'] }]),
    );
    stopUser = u.stop;
    const status = await u.api<{ scalers: { confinement: { mode: string }[] }[] }>(
      'GET',
      '/api/v1/scaler/status',
    );
    expect(status.body.scalers[0]!.confinement.map((c) => c.mode)).toEqual(['sandbox']);
    const { thiefAgent } = await takeover(u, ['linux', 'sandboxed']);
    const raw = u.output();
    const log = raw
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as Refusal);
    expectRefusalLogged(log, raw, thiefAgent);
  });

  it('root orchestrator: per-agent users, per-agent users in the sandbox, and the sandbox', async () => {
    expect(process.getuid?.()).toBe(0);
    const log = logSink();
    t = await startTestOrchestrator({
      logger: log.logger,
      config: config([
        { labels: ['linux', 'users'] },
        { labels: ['linux', 'both'], runAsUser: 'dynamic', env: { KICI_SANDBOX: 'true' } },
        { labels: ['linux', 'sandboxed'], env: { KICI_SANDBOX: 'true' } },
      ]),
    });
    const status = await t.api<{ scalers: { confinement: { mode: string }[] }[] }>(
      'GET',
      '/api/v1/scaler/status',
    );
    expect(status.body.scalers.map((s) => s.confinement[0]!.mode)).toEqual([
      'users',
      'users+sandbox',
      'sandbox',
    ]);
    const target = { ...t, wsUrl: t.orch.wsUrl };
    const rounds = await Promise.all(
      [['users'], ['both'], ['sandboxed']].map((l) => takeover(target, ['linux', ...l])),
    );
    for (const { thiefAgent } of rounds) expectRefusalLogged(log.lines, log.raw.join('\n'), thiefAgent);
  });
});
