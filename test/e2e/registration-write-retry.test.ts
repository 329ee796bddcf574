/**
 * A scaled agent whose registration's session write fails in the store: the scaler had already
 * counted it registered, and the server closed its connection asking it to retry. Whether it comes
 * back or not, its scaler entry must end exactly once and its job must run. On the real server,
 * store (a statement fault injected through a Kysely plugin) and agent process.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { OpenedDatabase } from '../../src/store/open.js';
import { memoryDatabase } from '../helpers/data-dir.js';
import {
  bareMetalConfig,
  eventually,
  startTestOrchestrator,
  type TestOrchestrator,
} from '../helpers/orchestrator.js';
import { noteDestroys, settled } from '../helpers/scaler-teardowns.js';
import { failing, recording, SESSION_INSERT, SPAWN_ROW } from '../helpers/statement-fault.js';

let t: TestOrchestrator | undefined;
let opened: OpenedDatabase | undefined;
afterEach(async () => {
  await t?.stop();
  await opened?.close();
  t = opened = undefined;
});

/** The one agent the scaler holds while the job's registration is under way. */
function registeringAgent(orch: TestOrchestrator): string {
  const entries = orch.orch.scaler!.entries();
  expect(entries).toHaveLength(1);
  return entries[0]!.agentId;
}

async function submit(orch: TestOrchestrator, run = 'true'): Promise<string> {
  const { status, body } = await orch.api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
    jobs: { one: { runsOn: ['linux', 'small'], steps: [{ run }] } },
  });
  expect(status).toBe(201);
  return body.jobs[0]!.id;
}

describe('a registration whose session write fails', () => {
  it('lets the agent back in on its retry, with its bound job, and tears it down once', async () => {
    opened = await memoryDatabase();
    const { database, sent } = recording(opened);
    let first: string | undefined;
    // Room for a second agent: had the job lost its agent on the way, another would be spawned. The
    // reconnect grace is shorter than the job: its end must not reach an agent that came back.
    const faulty = failing(database, SESSION_INSERT, 1, () => (first = registeringAgent(t!)));
    t = await startTestOrchestrator({
      config: bareMetalConfig({ maxAgents: 2 }),
      database: faulty.database,
      reconnectGraceMs: 200,
    });
    const destroyed = noteDestroys(t);
    const job = await t.waitForJob(await submit(t, 'sleep 1'));
    expect(job.state).toBe('succeeded');
    expect(faulty.failed.n).toBe(1);
    // The agent that was asked to retry is the one that ran the job; no other was started for it.
    expect(job.agentId).toBe(first);
    expect(sent.filter((s) => SPAWN_ROW.test(s))).toHaveLength(1);
    expect(sent.filter((s) => SESSION_INSERT.test(s))).toHaveLength(2);
    // Dismissed after its job, it is torn down once: the failed attempt did not end it as well.
    await eventually(settled(t), 15_000, 'the agent torn down after its job');
    expect(destroyed).toEqual([first]);
  });

  it("ends the scaler's entry when the agent never comes back, and the job still runs", async () => {
    opened = await memoryDatabase();
    const { database, sent } = recording(opened);
    let first: string | undefined;
    // The agent's process is killed as its session write fails: there will be no retry. A short
    // reconnect grace keeps the wait for the entry's end short.
    const faulty = failing(database, SESSION_INSERT, 1, () => {
      first = registeringAgent(t!);
      const ctx = t!.orch.scaler!.state.backends.get('bm')!.getScalerContext?.(first);
      process.kill(-(ctx?.pid as number), 'SIGKILL');
    });
    t = await startTestOrchestrator({
      config: bareMetalConfig({ maxAgents: 1 }),
      database: faulty.database,
      reconnectGraceMs: 300,
    });
    const destroyed = noteDestroys(t);
    const jobId = await submit(t);
    const scaler = t.orch.scaler!;
    // Its slot of the scaler's one is given back and its compute destroyed.
    const ended = () => {
      const m = first === undefined ? undefined : scaler.state.agents.get(first);
      if (m) throw new Error(`${first} still held, ${m.phase}`);
      return first;
    };
    await eventually(ended, 15_000, 'the unreturned agent torn down');
    await eventually(() => destroyed.includes(first!), 5_000, "the unreturned agent's compute destroyed");
    // The job was not lost with it: a new agent, in the freed slot, runs it.
    const job = await t.waitForJob(jobId, undefined, 30_000);
    expect(job.state).toBe('succeeded');
    expect(job.agentId).not.toBe(first);
    expect(sent.filter((s) => SPAWN_ROW.test(s))).toHaveLength(2);
    await eventually(settled(t), 15_000, 'every agent torn down');
    expect(destroyed.filter((id) => id === first)).toHaveLength(1);
  });
});
