/**
 * `kici-admin scaler reap-orphans` against a real orchestrator with a bare-metal scaler. Orphans are
 * real agent processes whose launcher exited (as after a kill -9 of their orchestrator); beside
 * them run an agent of another scaler and one whose launcher is still alive (another orchestrator's):
 * those must survive every sweep.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { findOrphanAgents } from '../../src/scaler/backends/bare-metal/orphans.js';
import {
  ADMIN_BIN,
  AGENT_BIN,
  NODE,
  alive,
  bareMetalConfig,
  eventually,
  runNode,
  startTestOrchestrator,
  type TestOrchestrator,
} from '../helpers/orchestrator.js';

let t: TestOrchestrator | undefined;
const pids: number[] = [];
const launchers: ChildProcess[] = [];
afterEach(async () => {
  for (const pid of pids.splice(0)) if (alive(pid)) process.kill(pid, 'SIGKILL');
  for (const c of launchers.splice(0)) if (c.exitCode === null) c.kill('SIGKILL');
  await t?.stop();
  t = undefined;
});

function agentEnv(agentId: string, scaler: string): NodeJS.ProcessEnv {
  return {
    PATH: process.env.PATH,
    KICI_AGENT_ID: agentId,
    KICI_AGENT_TOKEN: 'not-a-token',
    KICI_SCALER_MANAGED: '1',
    KICI_LABELS: `linux,kici:scaler:${scaler},kici:agent:${agentId}`,
    // Nothing listens there: the agent keeps retrying, like one whose orchestrator died.
    KICI_ORCHESTRATOR_URL: 'ws://127.0.0.1:1',
  };
}

/** A real agent whose launcher exits at once, so it is re-parented to init. Returns its pid. */
async function orphanAgent(agentId: string, scaler: string): Promise<number> {
  const sh = spawn('sh', ['-c', 'setsid "$0" "$1" </dev/null >/dev/null 2>&1 & echo $!', NODE, AGENT_BIN], {
    env: agentEnv(agentId, scaler),
    stdio: ['ignore', 'pipe', 'ignore'],
  });
  let out = '';
  sh.stdout!.on('data', (d) => (out += String(d)));
  await new Promise((r) => sh.on('close', r));
  const pid = Number(out.trim());
  pids.push(pid);
  await eventually(
    async () =>
      (
        await findOrphanAgents(
          scaler,
          () => false,
          () => false,
        )
      ).some((o) => o.pid === pid),
    10_000,
    `orphan ${agentId} re-parented`,
  );
  return pid;
}

/** A real agent whose launcher (this test process) is alive: it stands for another orchestrator's agent. */
function ownedAgent(agentId: string, scaler: string): number {
  const child = spawn(NODE, [AGENT_BIN], { env: agentEnv(agentId, scaler), detached: true, stdio: 'ignore' });
  launchers.push(child);
  pids.push(child.pid!);
  return child.pid!;
}

function admin(args: string[]) {
  return runNode([ADMIN_BIN, ...args], { KICI_SERVER_URL: t!.orch.url, KICI_ADMIN_TOKEN: t!.orch.adminToken })
    .exited;
}

describe('kici-admin scaler reap-orphans (bare-metal)', () => {
  it('lists orphans in a dry run, removes only them for real, and spares other scalers and live launchers', async () => {
    // The orphan's id starts with 0, the others' with f and e: a random tag starting with e or f
    // once gave two processes the same agent id, and the reap rightly took both.
    const tag = `0${randomBytes(4).toString('hex').slice(1)}`;
    const scaler = `reap${tag}`;
    const orphanId = `scaler-bare-metal-${tag}`;
    const orphan = await orphanAgent(orphanId, scaler);
    // The automatic sweep at start-up leaves bare-metal processes alone (another orchestrator on
    // this host may be about to re-adopt them); only the operator's command takes them.
    t = await startTestOrchestrator({ config: bareMetalConfig({ name: scaler }) });
    await new Promise((r) => setTimeout(r, 1_000));
    expect(alive(orphan)).toBe(true);
    const foreign = await orphanAgent(`scaler-bare-metal-f${tag.slice(1)}`, `other${tag}`);
    const owned = ownedAgent(`scaler-bare-metal-e${tag.slice(1)}`, scaler);

    const dry = await admin(['scaler', 'reap-orphans', '--dry-run', '--json']);
    expect(dry.code, dry.stderr).toBe(0);
    const report = JSON.parse(dry.stdout) as {
      dryRun: boolean;
      items: { scaler: string; agentId: string; ref: string; reason: string }[];
    };
    expect(report.dryRun).toBe(true);
    expect(report.items).toEqual([
      {
        scaler,
        agentId: orphanId,
        ref: String(orphan),
        reason: expect.stringMatching(/orchestrator is gone/),
      },
    ]);
    expect(alive(orphan)).toBe(true);

    const text = await admin(['scaler', 'reap-orphans', '--dry-run']);
    expect(text.stdout).toMatch(/would remove 1:/);
    expect(text.stdout).toMatch(
      new RegExp(`${scaler}\\s+${orphanId}\\s+${orphan}\\s+agent process whose orchestrator is gone`),
    );

    const real = await admin(['scaler', 'reap-orphans']);
    expect(real.code, real.stderr).toBe(0);
    expect(real.stdout).toMatch(/removed 1:/);
    await eventually(() => !alive(orphan), 10_000, 'the orphan agent to be gone');
    expect(alive(foreign)).toBe(true);
    expect(alive(owned)).toBe(true);

    const again = await admin(['scaler', 'reap-orphans', '--json']);
    expect(JSON.parse(again.stdout)).toEqual({ dryRun: false, items: [], errors: [] });
  });

  it('never lists an agent the registry knows, even with its launcher gone', async () => {
    const tag = randomBytes(4).toString('hex');
    const id = `scaler-bare-metal-${tag}`;
    const pid = await orphanAgent(id, `reg${tag}`);
    expect(
      (
        await findOrphanAgents(
          `reg${tag}`,
          () => false,
          () => false,
        )
      ).map((o) => o.pid),
    ).toEqual([pid]);
    expect(
      await findOrphanAgents(
        `reg${tag}`,
        () => false,
        (a) => a === id,
      ),
    ).toEqual([]);
    expect(
      await findOrphanAgents(
        `reg${tag}`,
        (a) => a === id,
        () => false,
      ),
    ).toEqual([]);
  });

  it('refuses a dryRun value that is not true or false', async () => {
    t = await startTestOrchestrator({ config: bareMetalConfig() });
    const r = await t.api<{ problems: string[] }>('POST', '/api/v1/scaler/reap-orphans?dryRun=yes');
    expect(r.status).toBe(400);
    expect(r.body.problems[0]).toMatch(/dryRun: expected true or false/);
  });
});
