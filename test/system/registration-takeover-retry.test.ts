/**
 * A scaled agent comes back to its restarted orchestrator still running its job, and its
 * registration fails in the store as the job it names is looked up (the moved-job takeover,
 * agent-routing.ts, which reads the job's row on a shared PostgreSQL only): the server closes the
 * connection asking it to retry. Like a failed session write (registration-write-retry.test.ts),
 * that must not end the agent's scaler entry, and its compute with it, at once: back within the
 * reconnect grace it carries on with its job; never back, it ends as a disconnected single-use
 * agent does. On the real server, PostgreSQL (a statement fault injected through a Kysely plugin)
 * and agent process; the restart keeps the store, the instance id and the port, and leaves the
 * agent running, as `serve` does on a second signal.
 */
import { randomBytes } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { openDatabase, type OpenedDatabase } from '../../src/store/index.js';
import {
  bareMetalConfig,
  eventually,
  startTestOrchestrator,
  type TestOrchestrator,
} from '../helpers/orchestrator.js';
import { freshTestDatabase, type TestDatabase } from '../helpers/pg-database.js';
import { noteDestroys, settled } from '../helpers/scaler-teardowns.js';
import { failing, JOB_READ, recording, SPAWN_ROW } from '../helpers/statement-fault.js';
import { tempDir } from '../helpers/temp-dirs.js';

const started: TestOrchestrator[] = [];
let opened: OpenedDatabase | undefined;
let pg: TestDatabase | undefined;
afterEach(async () => {
  for (const t of started.splice(0)) await t.stop();
  await opened?.close();
  await pg?.drop();
  opened = pg = undefined;
});

const config = bareMetalConfig({ maxAgents: 1 });

async function start(opts: Parameters<typeof startTestOrchestrator>[0]): Promise<TestOrchestrator> {
  const t = await startTestOrchestrator({ config, ...opts });
  started.push(t);
  return t;
}

/**
 * A job running on the one agent of a first orchestrator, which then stops leaving the agent be.
 * The step waits for `open` to be called, so the job is still running when the agent comes back.
 */
async function runningAcrossRestart(reconnectGraceMs: number) {
  pg = await freshTestDatabase('regtake');
  opened = await openDatabase({ url: pg.url });
  const { database, sent } = recording(opened);
  // Each orchestrator closes its store on stop: this one stays open for the next start.
  const store: OpenedDatabase = { ...database, close: async () => {} };
  const [dataDir, gateDir] = await Promise.all([tempDir('kici-restart-'), tempDir('kici-gate-')]);
  const gate = join(gateDir, 'open');
  const instanceId = `regtake-${randomBytes(3).toString('hex')}`;
  const before = await start({ database: store, dataDir, instanceId, reconnectGraceMs });
  const { status, body } = await before.api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
    jobs: {
      one: { runsOn: ['linux', 'small'], steps: [{ run: `until [ -e ${gate} ]; do sleep 0.05; done` }] },
    },
  });
  expect(status).toBe(201);
  const jobId = body.jobs[0]!.id;
  const agentId = (await before.waitForJob(jobId, ['running'])).agentId!;
  const pid = before.orch.scaler!.state.backends.get('bm')!.getScalerContext?.(agentId)?.pid as number;
  await before.orch.stop({ agents: 'leave' });
  return {
    store,
    sent,
    dataDir,
    instanceId,
    jobId,
    agentId,
    pid,
    port: Number(new URL(before.orch.url).port),
    open: () => writeFile(gate, ''),
  };
}

/**
 * The restarted orchestrator, where the first read of one job's row fails. Nothing reads a job's
 * row by id on the way but the agent's registration (the test makes no API call for the job until
 * then), so that is the read that fails; `onFault` runs just before. Resolves once it has failed.
 */
async function restartFailingTakeover(
  r: Awaited<ReturnType<typeof runningAcrossRestart>>,
  reconnectGraceMs: number,
  onFault: () => void = () => {},
) {
  let faulted = () => {};
  const fault = new Promise<void>((resolve) => (faulted = resolve));
  const faulty = failing(r.store, JOB_READ, 1, () => {
    onFault();
    faulted();
  });
  const after = await start({
    database: faulty.database,
    dataDir: r.dataDir,
    instanceId: r.instanceId,
    port: r.port,
    reconnectGraceMs,
  });
  const destroyed = noteDestroys(after);
  await fault;
  return { after, destroyed, failed: faulty.failed };
}

describe('a registration whose moved-job takeover fails', () => {
  it('lets the agent back in on its retry, still running its job, and tears it down once', async () => {
    // Long enough for the agent's backed-off redial after the failed registration.
    const grace = 10_000;
    const r = await runningAcrossRestart(grace);
    const { after, destroyed, failed } = await restartFailingTakeover(r, grace);
    expect(failed.n).toBe(1);
    await r.open();
    const job = await after.waitForJob(r.jobId);
    // The agent asked to retry is the one that finished the job; no other was started for it.
    expect(job.state).toBe('succeeded');
    expect(job.agentId).toBe(r.agentId);
    expect(r.sent.filter((s) => SPAWN_ROW.test(s))).toHaveLength(1);
    // Dismissed after its job, it is torn down once: the failed attempt did not end it as well.
    await eventually(settled(after), 15_000, 'the agent torn down after its job');
    expect(destroyed).toEqual([r.agentId]);
  });

  it("ends the scaler's entry when the agent never comes back; its running job fails", async () => {
    // The agent's process is killed as its registration fails: there will be no retry.
    const grace = 3_000;
    const r = await runningAcrossRestart(grace);
    const { after, destroyed } = await restartFailingTakeover(r, grace, () =>
      process.kill(-r.pid, 'SIGKILL'),
    );
    const scaler = after.orch.scaler!;
    await eventually(() => !scaler.state.agents.has(r.agentId), 15_000, 'the unreturned agent torn down');
    await eventually(() => destroyed.includes(r.agentId), 5_000, "the unreturned agent's compute destroyed");
    // As for any single-use agent gone with a running job: the job fails and is not run again.
    const job = await after.waitForJob(r.jobId);
    expect(job.state).toBe('failed');
    expect(job.reason).toMatch(/did not come back/);
    expect(r.sent.filter((s) => SPAWN_ROW.test(s))).toHaveLength(1);
    await eventually(settled(after), 15_000, 'every agent torn down');
    expect(destroyed).toEqual([r.agentId]);
  });
});
