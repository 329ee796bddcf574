import { mkdtemp, rm } from 'node:fs/promises';
import { afterEach, describe, expect, inject, it } from 'vitest';
import { startOrchestratorAs } from '../helpers/as-user.js';
import { outputLines, submit } from '../helpers/jobs.js';
import { AGENT_BIN, startTestOrchestrator, type TestOrchestrator } from '../helpers/orchestrator.js';
import { logSink, MEMORY_THIEF_STEP, THIEF_STEP, thiefEnv, TOKEN_RE } from '../helpers/takeover.js';

/**
 * Takeover on a confined bare-metal host: a step searches its agent (the parent's environment,
 * command line and open files, the files in reach, its own environment) for the agent's token and
 * registers as that agent claiming it has run nothing. Under each confinement (the bubblewrap
 * sandbox an unprivileged orchestrator chooses, and as root per-agent users, alone, inside the
 * sandbox, and the sandbox alone) it finds nothing, is refused (and the refusal logged), is handed
 * no job, and the job queued behind it runs on a real agent with its true result.
 * A second step reads the agent's memory, which the host may allow (no Yama ptrace restriction):
 * holding the live token but not the session proof, it is refused all the same, as a logged
 * security event; holding the proof as well, it is handed no job, and the real agent reconnects and
 * keeps its own.
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
interface Theft {
  /** The thief's agent. */
  agentId: string;
  /** The host let the step read its agent's memory, and the token was there. */
  fromMemory: boolean;
}
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
async function takeover(o: Target, runsOn: string[]): Promise<Theft> {
  const [thiefId, victimId] = await submit(o, {
    thief: {
      runsOn,
      env: thiefEnv(o.wsUrl),
      steps: [{ run: THIEF_STEP }, { run: MEMORY_THIEF_STEP }],
    },
    victim: { runsOn, env: { DEPLOY_KEY: 'k' }, steps: [{ run: 'echo victim ran; exit 3' }] },
  });
  const thief = await o.waitForJob(thiefId!, undefined, 60_000);
  const lines = await outputLines(o, thiefId!);
  const text = lines.join('\n');
  // It looked at the real agent: the agent's environment and descriptors were in its reach.
  expect(lines, text).toContainEqual(expect.stringMatching(/^thief saw: agent-env=1 fds=[1-9]/));
  expect(lines, text).toContain('thief found: nothing');
  expect(text).not.toMatch(TOKEN_RE);
  // The memory thief's finds depend on the host (see MEMORY_THIEF_STEP); the outcome must not.
  const found = lines.find((l) => l.startsWith('memory thief found: '));
  expect(found, text).toMatch(/^memory thief found: token=(yes|no) proof=(yes|no)$/);
  const fromMemory = found!.includes('token=yes');
  const withProof = found!.includes('proof=yes');
  // Every registration reached the orchestrator and was handed no job: a guessed token is refused
  // (4401), the live token without the session proof too (4412); with the proof the thief holds the
  // session for a moment, with the agent's labels but the server's own count of jobs (a single-use
  // agent gets no second), until the real agent reconnects with its proof and takes it back (4409).
  expect(
    lines.filter((l) => l.startsWith('attack ')),
    text,
  ).toEqual([
    'attack got register.rejected',
    'attack closed 4401',
    'attack got register.rejected',
    `attack closed ${fromMemory ? 4412 : 4401}`,
    ...(withProof ? ['attack got register.ack', 'attack closed 4409'] : []),
  ]);
  // The steps after each attack ran on the real agent, so the thief's own result is its true one.
  expect(thief.state, text).toBe('succeeded');
  const victim = await o.waitForJob(victimId!, undefined, 60_000);
  expect(victim.state).toBe('failed');
  expect(victim.exitCode).toBe(3);
  expect(victim.agentId).toMatch(/^scaler-/);
  expect(victim.agentId).not.toBe(thief.agentId);
  expect(await outputLines(o, victimId!)).toContain('victim ran');
  return { agentId: thief.agentId!, fromMemory };
}

/** The orchestrator logged each refusal, a live token without its proof as a security event. */
function expectRefusalsLogged(log: Refusal[], raw: string, thefts: Theft[]): void {
  for (const { agentId } of thefts)
    expect(log).toContainEqual(expect.objectContaining({ msg: 'agent refused', agentId, code: 4401 }));
  // A guessed token opens no session, so only a token read from memory is a security event.
  const events = log.filter((l) => l.securityEvent).map((l) => `${l.agentId} ${l.securityEvent}`);
  expect(events.sort()).toEqual(
    thefts
      .filter((x) => x.fromMemory)
      .map((x) => `${x.agentId} agent-session-unproven`)
      .sort(),
  );
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
    const theft = await takeover(u, ['linux', 'sandboxed']);
    const raw = u.output();
    const log = raw
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as Refusal);
    expectRefusalsLogged(log, raw, [theft]);
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
    const thefts = await Promise.all(
      [['users'], ['both'], ['sandboxed']].map((l) => takeover(target, ['linux', ...l])),
    );
    expectRefusalsLogged(log.lines, log.raw.join('\n'), thefts);
  });
});
