/**
 * The orchestrator owns single use: a scaler agent that reported its job's result is told to leave,
 * and cut off after a grace when it stays; either way its compute is destroyed as `job-complete`.
 * Driven through the real agent session, dispatcher and manager (PGlite, manual clock).
 */
import { describe, expect, it } from 'vitest';
import { DEFAULT_LEAVE_GRACE_MS } from '../../../src/server/agent-routing.js';
import { useManagerHarnesses, type ManagerHarness } from '../../helpers/manager-harness.js';
import { bareMetal } from '../../helpers/scaler-config.js';

const hs = useManagerHarnesses();
const config = { version: 1, scalers: [bareMetal('alpha', [['linux']])] };

/** A bound agent spawned, registered and running its job; returns the ids and the fake agent. */
async function running(h: ManagerHarness) {
  const { ids } = await h.submit({ a: { runsOn: ['linux'] } });
  const req = h.allSpawns().find((s) => s.boundJobId === ids[0])!;
  h.backendOf(req.agentId)!.resolveSpawn(req.agentId);
  await h.settle();
  const r = await h.registerAgent(req.agentId);
  if (!r.ok) throw new Error(r.reason);
  expect(h.assigned(req.agentId)).toEqual(ids);
  const session = r.agent.session!;
  await session.receive({ type: 'job.started', jobId: ids[0] });
  return { jobId: ids[0]!, agentId: req.agentId, agent: r.agent };
}

async function report(h: ManagerHarness, agent: Awaited<ReturnType<typeof running>>['agent'], jobId: string) {
  await agent.session!.receive({ type: 'job.finished', jobId, result: 'succeeded', exitCode: 0 });
  await h.settle();
}

describe('single use is the orchestrator’s decision', () => {
  it('after the stored result the agent is told to leave; leaving tears it down as job-complete', async () => {
    const h = await hs.make({ config });
    const { jobId, agentId, agent } = await running(h);
    await report(h, agent, jobId);
    const types = agent.messages.map((m) => m.type);
    expect(types.slice(-2)).toEqual(['job.finished.ack', 'shutdown']);
    expect(h.backend('alpha').destroys).toEqual([]);
    await h.disconnect(agentId); // it obeys
    expect(h.backend('alpha').destroys).toEqual([{ agentId, reason: 'job-complete', known: true }]);
    // The grace timer finds nothing to cut off, and nothing is destroyed twice.
    await h.advance(DEFAULT_LEAVE_GRACE_MS);
    expect(h.backend('alpha').destroys).toHaveLength(1);
    expect(await h.spawnRows()).toEqual([]);
    expect(h.manager.capBook().count()).toBe(0);
  });

  it('an agent that ignores the leave is cut off after the grace, and its compute destroyed', async () => {
    const h = await hs.make({ config, killOnDestroy: false });
    const { jobId, agentId, agent } = await running(h);
    await report(h, agent, jobId);
    await h.advance(DEFAULT_LEAVE_GRACE_MS - 1);
    expect(agent.connected).toBe(true);
    expect(h.backend('alpha').destroys).toEqual([]);
    await h.advance(1);
    expect(agent.connected).toBe(false);
    expect(h.dispatcher!.registry.get(agentId)).toBeUndefined();
    expect(h.backend('alpha').destroys).toEqual([{ agentId, reason: 'job-complete', known: true }]);
    expect(await h.jobState(jobId)).toBe('succeeded');
    expect(await h.spawnRows()).toEqual([]);
  });

  it('a static agent is never told to leave after a job', async () => {
    const h = await hs.make({ config });
    const box = await h.registerStatic('box-1', ['linux', 'static']);
    const { ids } = await h.submit({ s: { runsOn: ['static'] } });
    await h.pump();
    expect(h.assigned('box-1')).toEqual(ids);
    await box.session!.receive({ type: 'job.started', jobId: ids[0] });
    await report(h, box, ids[0]!);
    expect(box.messages.map((m) => m.type)).not.toContain('shutdown');
    await h.advance(DEFAULT_LEAVE_GRACE_MS * 2);
    expect(box.connected).toBe(true);
  });
});
