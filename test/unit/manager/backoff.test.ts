/**
 * Provision backoff per scaler and label set: consecutive failed launches defer further launches of
 * that label set 30 s, 60 s, 120 s … capped at 900 s; a registration clears it; other label sets
 * are not held; the classified error reaches the waiting job and the backoff snapshot.
 */
import { describe, expect, it } from 'vitest';
import { DeterministicSpawnError } from '../../../src/scaler/core/spawn-errors.js';
import type { ScaleJob, ScaleResult } from '../../../src/scaler/types.js';
import { useManagerHarnesses, type ManagerHarness } from '../../helpers/manager-harness.js';
import { bareMetal } from '../../helpers/scaler-config.js';

const hs = useManagerHarnesses();
let seq = 0;
const job = (runsOn: string[] = ['linux']): ScaleJob => ({ id: `job-${++seq}`, runId: 'run-1', runsOn });
const missing = () =>
  new DeterministicSpawnError('binary-missing', 'agent binary /opt/kici/agent does not exist');

async function scale(h: ManagerHarness, runsOn: string[] = ['linux']): Promise<ScaleResult> {
  const r = await h.manager.requestScale(job(runsOn));
  await h.settle();
  return r;
}

async function failOnce(h: ManagerHarness, runsOn: string[] = ['linux'], scaler = 'alpha'): Promise<string> {
  const r = await scale(h, runsOn);
  if (r.action !== 'spawning') throw new Error(`expected spawning, got ${JSON.stringify(r)}`);
  h.backend(scaler).failSpawn(r.agentId, missing());
  await h.settle();
  return r.agentId;
}

const config = {
  version: 1,
  scalers: [bareMetal('alpha', [['linux'], ['linux', 'big']]), bareMetal('beta', [['gpu']])],
};

describe('provision backoff', () => {
  it('defers 30 s, 60 s, 120 s, … capped at 900 s, and allows a launch exactly when the window ends', async () => {
    const h = await hs.make({ dispatcher: false, config });
    const expected = [30_000, 60_000, 120_000, 240_000, 480_000, 900_000, 900_000];
    for (const delay of expected) {
      await failOnce(h);
      const held = await scale(h);
      expect(held).toMatchObject({ action: 'skipped', retryAfterMs: delay });
      await h.advance(delay - 1);
      expect(await scale(h)).toMatchObject({ action: 'skipped', retryAfterMs: 1 });
      await h.advance(1);
    }
    expect((await scale(h)).action).toBe('spawning');
  });

  it('a registration of that label set resets the count', async () => {
    const h = await hs.make({ dispatcher: false, config });
    await failOnce(h);
    await h.advance(30_000);
    await failOnce(h);
    expect(h.manager.backoff.snapshot()).toEqual([expect.objectContaining({ consecutive: 2 })]);
    await h.advance(60_000);
    const r = await scale(h);
    if (r.action !== 'spawning') throw new Error(r.action);
    h.backend('alpha').resolveSpawn(r.agentId);
    await h.settle();
    // Spawned but not registered yet: still counted.
    expect(h.manager.backoff.snapshot()).toHaveLength(1);
    expect((await h.registerAgent(r.agentId)).ok).toBe(true);
    expect(h.manager.backoff.snapshot()).toEqual([]);
    await failOnce(h);
    expect(await scale(h)).toMatchObject({ action: 'skipped', retryAfterMs: 30_000 });
  });

  it('holds only the failing label set of the failing scaler', async () => {
    const h = await hs.make({ dispatcher: false, config });
    await failOnce(h, ['linux']);
    expect((await scale(h, ['linux'])).action).toBe('skipped');
    expect((await scale(h, ['big'])).action).toBe('spawning');
    expect((await scale(h, ['gpu'])).action).toBe('spawning');
    expect(h.manager.backoff.snapshot().map((e) => [e.scalerName, e.labelSetKey])).toEqual([
      ['alpha', 'linux'],
    ]);
  });

  it('passes the classified error to onSpawnFailed for the bound job and keeps it in the snapshot', async () => {
    const h = await hs.make({ config });
    const { ids } = await h.submit({ a: { runsOn: ['linux'] } });
    const id = h.backend('alpha').spawns[0]!.agentId;
    h.backend('alpha').failSpawn(id, missing());
    await h.settle();
    expect(h.hooks.spawnFailed).toEqual([
      {
        jobId: ids[0],
        error: {
          kind: 'binary-missing',
          message: 'agent binary /opt/kici/agent does not exist',
          deterministic: true,
        },
      },
    ]);
    expect(h.manager.backoff.snapshot()).toEqual([
      {
        key: 'alpha|linux',
        scalerName: 'alpha',
        labelSetKey: 'linux',
        consecutive: 1,
        deferUntilMs: h.clock.now() + 30_000,
        lastError: { kind: 'binary-missing', message: 'agent binary /opt/kici/agent does not exist' },
      },
    ]);
    expect(h.manager.failures.records()).toEqual([
      expect.objectContaining({
        scalerName: 'alpha',
        backendType: 'bare-metal',
        bound: true,
        kind: 'binary-missing',
      }),
    ]);
    // The waiting job says why, in memory and in the store.
    expect(h.d.queue.get(ids[0]!)?.waiting).toContain('binary-missing');
    expect((await h.store.jobs.get(ids[0]!))?.last_provisioning_error).toContain('binary-missing');
    // The job is not provisioned again while held, even by a periodic sweep.
    await h.advance(29_000);
    await h.sweep();
    expect(h.backend('alpha').spawns).toHaveLength(1);
    expect(h.d.queue.get(ids[0]!)?.waiting).toContain('failed to start an agent');
    await h.advance(1_000);
    await h.sweep();
    expect(h.backend('alpha').spawns).toHaveLength(2);
    expect(h.backend('alpha').spawns[1]!.boundJobId).toBe(ids[0]);
  });

  it('an agent process that exits before registering arms the backoff and gives everything back', async () => {
    const h = await hs.make({ config });
    const { ids } = await h.submit({ a: { runsOn: ['linux'] } });
    const b = h.backend('alpha');
    const id = b.spawns[0]!.agentId;
    b.resolveSpawn(id);
    await h.settle();
    expect(await h.spawnRows()).toEqual([
      expect.objectContaining({ agent_id: id, backend_ref: `rec:${id}` }),
    ]);
    b.emitFailed(id, 'agent process exited with code 127 before it registered');
    await h.settle();
    expect(h.hooks.spawnFailed).toEqual([
      { jobId: ids[0], error: expect.objectContaining({ kind: 'exited-before-register' }) },
    ]);
    expect(h.manager.backoff.snapshot()).toEqual([
      expect.objectContaining({
        consecutive: 1,
        lastError: expect.objectContaining({ kind: 'exited-before-register' }),
      }),
    ]);
    expect(h.manager.capBook().count()).toBe(0);
    expect(h.manager.entries()).toEqual([]);
    expect(await h.spawnRows()).toEqual([]);
    expect(await h.reservationRows()).toEqual([]);
    // The job event reached the job's timeline.
    expect(h.hooks.jobEvents).toContainEqual({
      jobId: ids[0],
      type: 'scaler.failed',
      detail: expect.stringContaining('code 127'),
    });
    // Its registration is now refused: the id is unknown and its token revoked.
    expect((await h.registerAgent(id)).ok).toBe(false);
  });

  it('a backend that reports scaler.failed and then rejects the spawn counts one failure', async () => {
    const h = await hs.make({ dispatcher: false, config });
    const r = await scale(h);
    if (r.action !== 'spawning') throw new Error(r.action);
    const b = h.backend('alpha');
    b.emit(r.agentId, 'scaler.failed', 'agent binary /opt/kici/agent does not exist');
    b.failSpawn(r.agentId, missing());
    await h.settle();
    expect(h.manager.backoff.snapshot()).toEqual([expect.objectContaining({ consecutive: 1 })]);
    expect(h.manager.failures.records()).toHaveLength(1);
  });

  it('a warm (unbound) failure also arms the backoff of its label set', async () => {
    const h = await hs.make({ dispatcher: false, config });
    const match = h.manager.routingTable().find((t) => t.scalerName === 'alpha' && t.key === 'big,linux')!;
    const r = await h.manager.provision(match, h.manager.resourcesFor(match));
    await h.settle();
    if (r.action !== 'spawning') throw new Error(r.action);
    h.backend('alpha').failSpawn(r.agentId, missing());
    await h.settle();
    expect(h.hooks.spawnFailed).toEqual([]);
    expect(await scale(h, ['big'])).toMatchObject({ action: 'skipped', retryAfterMs: 30_000 });
    expect((await scale(h, ['linux'])).action).toBe('spawning');
  });
});
