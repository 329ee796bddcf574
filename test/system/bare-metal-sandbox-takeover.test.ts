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
 * A second step reads the agent's memory, which a same-uid process may do on a host with no Yama
 * ptrace restriction (this one): the agent runs non-dumpable, so the kernel refuses the read in
 * every mode, and the step finds neither the token nor the session proof.
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
      steps: [
        { run: THIEF_STEP },
        { run: MEMORY_THIEF_STEP },
        { run: 'echo "agent runs: $(tr "\\0" "\\n" < /proc/$PPID/cmdline | head -n1)"' },
      ],
    },
    victim: { runsOn, env: { DEPLOY_KEY: 'k' }, steps: [{ run: 'echo victim ran; exit 3' }] },
  });
  const thief = await o.waitForJob(thiefId!, undefined, 60_000);
  const lines = await outputLines(o, thiefId!);
  const text = lines.join('\n');
  // The agent is sealed: its environment, descriptors and memory are closed to its own step (a
  // step as root, in the root sandbox, may still list the descriptors, but open none).
  expect(lines, text).toContainEqual(expect.stringMatching(/^thief saw: agent-env=0 fds=\d+$/));
  expect(lines, text).toContain('thief found: nothing');
  expect(text).not.toMatch(TOKEN_RE);
  expect(lines, text).toContain('memory thief found: token=no proof=no');
  // Sealed from its start: the scaler ran it on its shared execute-only Node, no copy of its own.
  expect(lines, text).toContainEqual(
    expect.stringMatching(/^agent runs: \/\S*\/kici-sealed-node-\d+-[0-9a-f]{16}\/node$/),
  );
  // Each registration reached the orchestrator and was refused as a guess (4401), handed no job.
  expect(
    lines.filter((l) => l.startsWith('attack ')),
    text,
  ).toEqual([
    'attack got register.rejected',
    'attack closed 4401',
    'attack got register.rejected',
    'attack closed 4401',
  ]);
  // The steps after each attack ran on the real agent, so the thief's own result is its true one.
  expect(thief.state, text).toBe('succeeded');
  const victim = await o.waitForJob(victimId!, undefined, 60_000);
  expect(victim.state).toBe('failed');
  expect(victim.exitCode).toBe(3);
  expect(victim.agentId).toMatch(/^scaler-/);
  expect(victim.agentId).not.toBe(thief.agentId);
  expect(await outputLines(o, victimId!)).toContain('victim ran');
  return { agentId: thief.agentId! };
}

/** The orchestrator logged each refusal. */
function expectRefusalsLogged(log: Refusal[], raw: string, thefts: Theft[]): void {
  for (const { agentId } of thefts)
    expect(log).toContainEqual(expect.objectContaining({ msg: 'agent refused', agentId, code: 4401 }));
  // No live token was found, so no session was challenged: no security event.
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
