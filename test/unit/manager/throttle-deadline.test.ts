/**
 * Spawn throttle and deadline: at most `maxConcurrentSpawns` backend.spawn calls in flight per
 * backend, and a spawn deadline (counted from semaphore admission) that aborts the backend's signal
 * and frees the slot and the reservation.
 */
import { describe, expect, it } from 'vitest';
import type { ScaleJob } from '../../../src/scaler/types.js';
import { useManagerHarnesses, type ManagerHarness } from '../../helpers/manager-harness.js';
import { bareMetal } from '../../helpers/scaler-config.js';

const hs = useManagerHarnesses();
let seq = 0;
const job = (runsOn: string[] = ['linux']): ScaleJob => ({ id: `job-${++seq}`, runId: 'run-1', runsOn });

async function scaleN(h: ManagerHarness, n: number, runsOn: string[] = ['linux']): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < n; i++) {
    const r = await h.manager.requestScale(job(runsOn));
    if (r.action !== 'spawning') throw new Error(`expected spawning, got ${r.action}`);
    ids.push(r.agentId);
  }
  await h.settle();
  return ids;
}

describe('spawn throttle', () => {
  it('defaults to 8 spawn calls in flight per backend; a finished spawn admits the next', async () => {
    const h = await hs.make({
      dispatcher: false,
      config: { version: 1, scalers: [bareMetal('alpha', [['linux']], { maxAgents: 20 })] },
    });
    const ids = await scaleN(h, 10);
    const b = h.backend('alpha');
    expect(b.spawns).toHaveLength(8);
    expect(b.inFlight).toBe(8);
    expect(h.manager.capBook().count()).toBe(10);
    // FIFO: the first eight reserved are the first eight admitted.
    expect(b.spawns.map((s) => s.agentId)).toEqual(ids.slice(0, 8));
    b.resolveSpawn(ids[0]!);
    await h.settle();
    expect(b.spawns.map((s) => s.agentId)).toEqual(ids.slice(0, 9));
    b.failSpawn(ids[1]!, new Error('flaky'));
    await h.settle();
    expect(b.spawns.map((s) => s.agentId)).toEqual(ids);
    expect(b.maxInFlight).toBe(8);
  });

  it('honours a configured width and throttles each backend separately', async () => {
    const h = await hs.make({
      dispatcher: false,
      config: {
        version: 1,
        scalers: [
          bareMetal('alpha', [['a']], { maxConcurrentSpawns: 2 }),
          bareMetal('beta', [['b']], { maxConcurrentSpawns: 1 }),
        ],
      },
    });
    const a = await scaleN(h, 4, ['a']);
    await scaleN(h, 3, ['b']);
    expect(h.backend('alpha').inFlight).toBe(2);
    expect(h.backend('beta').inFlight).toBe(1);
    for (const id of a) {
      if (h.backend('alpha').pendingIds().includes(id)) h.backend('alpha').resolveSpawn(id);
      await h.settle();
    }
    expect(h.backend('alpha').maxInFlight).toBe(2);
    expect(h.backend('beta').maxInFlight).toBe(1);
  });
});

describe('spawn deadline', () => {
  it('aborts the backend signal at spawnTimeoutMs, frees the reservation, and the job can be re-scaled', async () => {
    const h = await hs.make({
      spawnTimeoutMs: 5_000,
      config: { version: 1, scalers: [bareMetal('alpha', [['linux']], { maxAgents: 1 })] },
    });
    const { ids } = await h.submit({ a: { runsOn: ['linux'] } });
    const b = h.backend('alpha');
    const first = b.spawns[0]!;
    await h.advance(4_999);
    expect(first.signal.aborted).toBe(false);
    expect(h.manager.capBook().count()).toBe(1);
    await h.advance(1);
    expect(first.signal.aborted).toBe(true);
    expect(b.aborted).toEqual([first.agentId]);
    expect(h.manager.capBook().count()).toBe(0);
    expect(h.manager.entries()).toEqual([]);
    expect(await h.spawnRows()).toEqual([]);
    expect(await h.reservationRows()).toEqual([]);
    expect(h.hooks.spawnFailed).toEqual([
      { jobId: ids[0], error: expect.objectContaining({ kind: 'spawn-timeout' }) },
    ]);
    expect(h.manager.isProvisioning(ids[0]!)).toBe(false);
    expect(await h.jobState(ids[0]!)).toBe('queued');
    // Once nothing holds the job back any more (backoff window included), it is provisioned again.
    await h.advance(900_000);
    await h.sweep();
    expect(b.spawns).toHaveLength(2);
    expect(b.spawns[1]!.boundJobId).toBe(ids[0]);
  });

  it('counts from semaphore admission, not from the reservation', async () => {
    const h = await hs.make({
      dispatcher: false,
      spawnTimeoutMs: 5_000,
      config: { version: 1, scalers: [bareMetal('alpha', [['linux']], { maxConcurrentSpawns: 1 })] },
    });
    const [a, b] = await scaleN(h, 2);
    const be = h.backend('alpha');
    await h.advance(3_000);
    be.resolveSpawn(a!);
    await h.settle();
    // b was admitted at t=3000: its deadline is t=8000.
    const reqB = be.requestFor(b!)!;
    await h.advance(4_999);
    expect(reqB.signal.aborted).toBe(false);
    await h.advance(1);
    expect(reqB.signal.aborted).toBe(true);
  });

  it('frees the spawn slot even when the backend ignores the abort (non-abortable call)', async () => {
    const h = await hs.make({
      dispatcher: false,
      spawnTimeoutMs: 5_000,
      config: { version: 1, scalers: [bareMetal('alpha', [['linux']], { maxConcurrentSpawns: 1 })] },
      configureBackend: (b) => {
        b.ignoreAbort = true;
      },
    });
    const [a, b] = await scaleN(h, 2);
    const be = h.backend('alpha');
    expect(be.spawns.map((s) => s.agentId)).toEqual([a]);
    await h.advance(5_000);
    expect(be.spawns.map((s) => s.agentId)).toEqual([a, b]);
    expect(h.manager.entries().map((e) => e.agentId)).toEqual([b]);
    // a's compute was asked to go away when its spawn failed.
    expect(be.destroys.map((d) => d.agentId)).toContain(a);
  });

  it('a spawn aborted while still queued for a slot never reaches the backend', async () => {
    const h = await hs.make({
      dispatcher: false,
      config: { version: 1, scalers: [bareMetal('alpha', [['linux']], { maxConcurrentSpawns: 1 })] },
    });
    const [, queued] = await scaleN(h, 2);
    await h.manager.shutdownAll(1_000);
    await h.settle();
    expect(h.backend('alpha').spawns.map((s) => s.agentId)).not.toContain(queued);
    expect(h.manager.capBook().count()).toBe(0);
  });

  it('an agent that registered before spawn() returned is not killed by the deadline', async () => {
    const h = await hs.make({
      spawnTimeoutMs: 5_000,
      config: { version: 1, scalers: [bareMetal('alpha', [['linux']])] },
    });
    const { ids } = await h.submit({ a: { runsOn: ['linux'] } });
    const b = h.backend('alpha');
    const req = b.spawns[0]!;
    // The agent dials in while the backend is still finishing its spawn() (e.g. a slow post-start step).
    expect((await h.registerAgent(req.agentId)).ok).toBe(true);
    await h.startJob(req.agentId, ids[0]!);
    await h.advance(5_000);
    expect(req.signal.aborted).toBe(false);
    expect(b.agents.has(req.agentId)).toBe(true);
    expect(await h.jobState(ids[0]!)).toBe('running');
  });
});
