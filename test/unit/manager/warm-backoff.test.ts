/**
 * A warm-pool spawn that fails to start (its agent exits before registering) is counted and shown,
 * but does not defer the label set for the jobs that need it; one the host refused outright does.
 */
import { describe, expect, it } from 'vitest';
import { DeterministicSpawnError } from '../../../src/scaler/core/spawn-errors.js';
import { useManagerHarnesses } from '../../helpers/manager-harness.js';
import { bareMetal, scalerConfig } from '../../helpers/scaler-config.js';

const hs = useManagerHarnesses();

const config = scalerConfig({
  version: 1,
  scalers: [
    bareMetal('warm', [{ labels: ['linux'], resources: { requests: { cpus: 1, memory: '512m' } } }], {
      maxAgents: 5,
      warmPool: { enabled: true, size: 1, idleTimeoutSeconds: 60 },
    }),
  ],
});

describe('warm-pool failures and provision backoff', () => {
  it('a warm agent exiting before it registers does not defer a job of its label set', async () => {
    const h = await hs.make({ config });
    h.manager.warm.start();
    await h.settle();
    const b = h.backend('warm');
    const [warmId] = b.pendingIds();
    b.resolveSpawn(warmId!);
    await h.settle();
    b.emitFailed(warmId!, 'agent process exited with code 1 before it registered');
    await h.settle();
    const [state] = h.manager.backoff.snapshot();
    expect(state).toMatchObject({ consecutive: 1 });
    expect(state!.deferUntilMs).toBeLessThanOrEqual(h.clock.now());
    const r = await h.manager.requestScale({ id: 'j-after-warm', runId: 'r-1', runsOn: ['linux'] });
    expect(r.action).toBe('spawning');
  });

  it('control: a warm spawn the host refused outright does defer the label set', async () => {
    const h = await hs.make({ config });
    h.manager.warm.start();
    await h.settle();
    const b = h.backend('warm');
    const [warmId] = b.pendingIds();
    b.failSpawn(warmId!, new DeterministicSpawnError('config', 'the agent binary is not executable'));
    await h.settle();
    expect(h.manager.backoff.snapshot()[0]!.deferUntilMs).toBeGreaterThan(h.clock.now());
    const r = await h.manager.requestScale({ id: 'j-after-refusal', runId: 'r-1', runsOn: ['linux'] });
    expect(r).toMatchObject({ action: 'skipped', retryAfterMs: expect.any(Number) });
  });
});
