/**
 * A wall-clock step of an hour, forward and back, on the server process (libfaketime; the host's
 * clock and every agent's stay put) while a static agent and a bare-metal scaler agent each run a
 * job: no agent is closed, no uptime goes negative, and both jobs succeed on the agent they started on.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { listAgentProcesses } from '../../src/scaler/backends/bare-metal/orphans.js';
import { clockOffset, twoBeats, type AgentBeatView, type ClockOffset } from '../helpers/faketime.js';
import { jobGate } from '../helpers/jobs.js';
import {
  startOrchestratorProcess,
  startStaticAgentProcess,
  type OrchProcess,
} from '../helpers/orch-process.js';
import {
  AGENT_BIN,
  bareMetalConfig,
  eventually,
  writeConfig,
  type JobBody,
} from '../helpers/orchestrator.js';

const HOUR = 3_600_000;
const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
});

/** The server's wall clock, from its Date header (second precision). */
async function serverNow(o: OrchProcess): Promise<number> {
  const res = await fetch(`${o.url}/healthz`);
  return Date.parse(res.headers.get('date')!);
}

async function agents(o: OrchProcess): Promise<AgentBeatView[]> {
  return (await o.api<{ agents: AgentBeatView[] }>('GET', '/api/v1/agents')).body.agents;
}

async function waitRunning(o: OrchProcess, id: string): Promise<JobBody> {
  let job: JobBody | undefined;
  await eventually(
    async () => {
      job = (await o.api<JobBody>('GET', `/api/v1/jobs/${id}`)).body;
      return job.state === 'running';
    },
    60_000,
    `job ${id} running`,
  );
  return job!;
}

describe('wall-clock step of the server', () => {
  it('fails no job and closes no agent when the clock jumps an hour forward and back', async () => {
    const offset: ClockOffset = await clockOffset();
    cleanups.push(() => offset.close());
    const tokenDir = await mkdtemp(join(tmpdir(), 'kici-jump-'));
    cleanups.push(() => rm(tokenDir, { recursive: true, force: true }));
    const config = await writeConfig(
      bareMetalConfig({ name: 'jump', maxAgents: 1 }, [{ labels: ['linux', 'jump'], binaryPath: AGENT_BIN }]),
    );
    const o = await startOrchestratorProcess({
      args: ['--config', config],
      env: offset.env,
      adminTokenFile: join(tokenDir, 'admin-token'),
    });
    cleanups.push(() => o.stop());
    const staticAgent = await startStaticAgentProcess(o, 'jump-static', ['linux', 'static-jump']);
    cleanups.push(async () => {
      staticAgent.child.kill('SIGKILL');
      await staticAgent.exited;
    });
    const gate = await jobGate();
    cleanups.push(() => gate.close());
    // Runs first: a job still held would keep its agents (a stop leaves agents that hold a job).
    cleanups.push(async () => {
      await gate.open();
      for (const p of await listAgentProcesses('jump')) process.kill(p.pid, 'SIGKILL');
    });
    const run = await o.api<{ jobs: { id: string; name: string }[] }>('POST', '/api/v1/runs', {
      jobs: {
        scaled: { runsOn: ['linux', 'jump'], steps: [{ run: gate.wait }] },
        fixed: { runsOn: ['static-jump'], steps: [{ run: gate.wait }] },
      },
    });
    expect(run.status).toBe(201);
    const ids = run.body.jobs.map((j) => j.id);
    const started = await Promise.all(ids.map((id) => waitRunning(o, id)));
    const agentIds = started.map((j) => j.agentId!);

    for (const [step, hours] of [
      ['+1h', 1],
      ['+0', 0],
      ['-1h', -1],
      ['+0', 0],
    ] as const) {
      await offset.set(step);
      // The step took: the server's clock is off the host's by the offset, give or take a minute
      // (its Date header is cached for up to a second).
      await eventually(
        async () => Math.abs((await serverNow(o)) - Date.now() - hours * HOUR) < 60_000,
        10_000,
        `the server's clock at ${step}`,
      );
      await twoBeats(() => agents(o), agentIds);
    }

    await gate.open();
    for (const [i, id] of ids.entries()) {
      const done = await o.waitForJob(id);
      expect(done.state, `job ${id}: ${done.reason ?? ''}`).toBe('succeeded');
      expect(done.agentId).toBe(agentIds[i]);
    }
    const log = o.output().stdout + o.output().stderr;
    expect(log).not.toMatch(/heartbeat[ -]timeout/);
    expect(staticAgent.child.exitCode).toBeNull();
  });
});
