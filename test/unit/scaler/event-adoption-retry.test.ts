/**
 * An event agent adopted through its spawn row, whose registration then failed on the server's
 * side (a store write): the agent was asked to dial again, and the job its failed registration was
 * handed waits for it through the reconnect grace (registration-return.ts). Its retry must get
 * that job whether or not the adopting instance configures the agent's scaler: without it, the
 * agent is re-adopted through its row, which by then says it registered before and so names no job.
 * Real ScalerManagers on the real embedded store; only the scale events' webhook is a fake.
 */
import { describe, expect, it } from 'vitest';
import {
  RegistrationRefused,
  ScalerAdoptionLookupError,
  type ScalerManager,
} from '../../../src/scaler/manager.js';
import type { OpenedDatabase } from '../../../src/store/index.js';
import { A_TARGETS, insertRow, instanceManager, storePerTest } from '../../helpers/adoption-store.js';
import { failingWhile, SPAWN_ADOPT } from '../../helpers/statement-fault.js';

const store = storePerTest();

const GRACE_MS = 30_000;
const REDIAL_MS = 1_000;

/** Whether the manager still answers for the agent (in its index, or as an adopted agent's spec). */
const held = (m: ScalerManager, agentId: string) => m.state.agents.has(agentId) || m.adoption.has(agentId);

/**
 * An agent of `orch-a`'s spawn, bound to `jobId`, registered on `orch-b` whose write then failed.
 * `through`: plugins between orch-b's store and its database (statement-fault.ts).
 */
async function failedAfterAdoption(
  agentId: string,
  jobId: string,
  configured: boolean,
  through?: (db: OpenedDatabase) => OpenedDatabase,
) {
  const s = await store(through);
  await insertRow(s, agentId, { boundJobId: jobId });
  const b = instanceManager(s, 'orch-b', { configured });
  expect(await b.m.registerAgent(agentId)).toMatchObject({ boundJobId: jobId });
  b.m.onRegistrationFailed(agentId, jobId, GRACE_MS);
  // No other agent is provisioned for the job while it waits.
  expect(b.m.state.jobToAgent.get(jobId)).toBe(agentId);
  // The agent's redial takes a moment: its row then says it registered before.
  b.clock.advance(REDIAL_MS);
  return b;
}

describe('an adopted event agent back after its registration failed', () => {
  for (const configured of [false, true]) {
    const where = configured ? 'with its scaler configured here' : 'without its scaler configured here';
    it(`${where}: gets the job that waited for it, and its grace stops`, async () => {
      const id = `scaler-event-retry00${configured ? 1 : 2}`;
      const b = await failedAfterAdoption(id, 'j-5', configured);
      const again = await b.m.registerAgent(id);
      expect(again?.boundJobId).toBe('j-5');
      expect(b.m.state.jobToAgent.has('j-5')).toBe(false);
      // Past the grace the agent that came back is still held, and no scale-down went out for it.
      b.clock.advance(GRACE_MS + 1);
      expect(held(b.m, id)).toBe(true);
      expect(b.emitter.downs(id)).toHaveLength(0);
    });
  }

  it('control: one that does not come back in time is torn down as its grace ends, its job freed', async () => {
    const id = 'scaler-event-retry003';
    const b = await failedAfterAdoption(id, 'j-6', false);
    b.clock.advance(GRACE_MS + 1);
    // The teardown takes the agent out of the manager as it begins.
    expect(held(b.m, id)).toBe(false);
    expect(b.m.state.jobToAgent.has('j-6')).toBe(false);
  });

  it('control: a plain reconnect, with no failed registration before it, is handed no job again', async () => {
    const id = 'scaler-event-retry004';
    const s = await store();
    await insertRow(s, id, { boundJobId: 'j-7' });
    const b = instanceManager(s, 'orch-b', { configured: false });
    expect(await b.m.registerAgent(id)).toMatchObject({ boundJobId: 'j-7' });
    b.clock.advance(REDIAL_MS);
    // The row says it registered before, and nothing waits for it.
    expect((await b.m.registerAgent(id))?.boundJobId).toBeUndefined();
  });
});

describe('an adopted event agent whose retry fails again before its adoption', () => {
  // The server refuses the retry without telling the scaler: the scaler's own wait must carry on.
  const failures = [
    {
      what: 'the store fails under its adoption',
      retry: async (m: ScalerManager, id: string, s: { down: boolean }) => {
        s.down = true;
        await expect(m.registerAgent(id)).rejects.toThrow(ScalerAdoptionLookupError);
        s.down = false;
      },
    },
    {
      what: 'its spawn row is gone, so its adoption is refused',
      retry: async (m: ScalerManager, id: string) => {
        await m.opts.store.db.deleteFrom('scaler_spawning_agents').where('agent_id', '=', id).execute();
        await expect(m.registerAgent(id)).rejects.toThrow(RegistrationRefused);
      },
    },
  ];
  failures.forEach(({ what, retry }, i) => {
    it(`${what}: still waits to its first deadline, its job held, then is torn down`, async () => {
      const id = `scaler-event-retry01${i}`;
      const fault = { down: false };
      const b = await failedAfterAdoption(id, 'j-8', false, (db) =>
        failingWhile(db, SPAWN_ADOPT, () => fault.down),
      );
      await retry(b.m, id, fault);
      // Still waited for, and the job with it: no other agent is provisioned for the job meanwhile.
      expect(b.m.state.jobToAgent.get('j-8')).toBe(id);
      // The failed retry did not move the deadline (set GRACE_MS before the redial).
      b.clock.advance(GRACE_MS - REDIAL_MS - 1);
      expect(held(b.m, id)).toBe(true);
      b.clock.advance(2);
      // Not back: ended as any unreturned agent is, its scale-down sent to the targets of its spawn.
      expect(held(b.m, id)).toBe(false);
      expect(b.m.state.jobToAgent.has('j-8')).toBe(false);
      expect(b.emitter.downs(id)).toMatchObject([{ targets: A_TARGETS }]);
      expect(b.m.returns.size).toBe(0);
    });
  });

  it('comes back in time after all: gets its job, and its grace stops', async () => {
    const id = 'scaler-event-retry012';
    const fault = { down: false };
    const b = await failedAfterAdoption(id, 'j-9', false, (db) =>
      failingWhile(db, SPAWN_ADOPT, () => fault.down),
    );
    await failures[0]!.retry(b.m, id, fault);
    expect((await b.m.registerAgent(id))?.boundJobId).toBe('j-9');
    b.clock.advance(GRACE_MS + 1);
    expect(held(b.m, id)).toBe(true);
    expect(b.emitter.downs(id)).toHaveLength(0);
  });
});

describe("the return watch at an agent's end", () => {
  for (const configured of [false, true]) {
    const where = configured ? 'with its scaler configured here' : 'without its scaler configured here';
    it(`${where}: an agent that came back and then left leaves nothing in it`, async () => {
      const id = `scaler-event-retry02${configured ? 1 : 0}`;
      const b = await failedAfterAdoption(id, 'j-10', configured);
      await b.m.registerAgent(id);
      // Back, it is still kept: a retry failing later does not move the deadline either.
      expect(b.m.returns.has(id)).toBe(true);
      await b.m.onAgentDisconnected(id, 'job-complete');
      expect(b.emitter.downs(id)).toHaveLength(1);
      expect(b.m.returns.has(id)).toBe(false);
      expect(b.m.returns.size).toBe(0);
    });
  }
});
