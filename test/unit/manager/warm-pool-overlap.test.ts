/**
 * Warm-pool over-spawn: a tick computed its deficit once and then awaited each spawn, so a second
 * tick that started meanwhile saw the first one's in-flight agent, computed its own deficit, and
 * both spawned: 3 agents for a pool of size 2. A tick now runs single-flight; calls made while it
 * runs coalesce into one re-run after it.
 */
import { describe, expect, it } from 'vitest';
import { useManagerHarnesses } from '../../helpers/manager-harness.js';
import { bareMetal, scalerConfig } from '../../helpers/scaler-config.js';

const hs = useManagerHarnesses();

function warmConfig(size: number, maxAgents = 10) {
  return scalerConfig({
    version: 1,
    scalers: [
      bareMetal('warm', [{ labels: ['linux'], resources: { requests: { cpus: 1, memory: '256m' } } }], {
        maxAgents,
        warmPool: { enabled: true, size, idleTimeoutSeconds: 60 },
      }),
    ],
  });
}

describe('overlapping warm-pool ticks', () => {
  it('two ticks started together spawn exactly the pool size, not more', async () => {
    // The recording backend's spawns never settle on their own: every spawn stays in flight.
    const h = await hs.make({ config: warmConfig(2) });
    const first = h.manager.warm.tick();
    const second = h.manager.warm.tick();
    await Promise.all([first, second]);
    await h.settle();
    const b = h.backend('warm');
    expect(b.spawns).toHaveLength(2);
    expect(h.manager.capBook().count('warm')).toBe(2);
    expect(h.manager.entries()).toHaveLength(2);
  });

  it('many overlapping ticks (timer, replenish, manual) still never exceed the size', async () => {
    const h = await hs.make({ config: warmConfig(3) });
    const ticks = Array.from({ length: 5 }, () => h.manager.warm.tick());
    await Promise.all(ticks);
    await h.settle();
    expect(h.backend('warm').spawns).toHaveLength(3);
  });

  it('a call made during a tick is not lost: it runs once more after the tick', async () => {
    const h = await hs.make({ config: warmConfig(2) });
    const b = h.backend('warm');
    // Compute the manager does not own fills the scaler: the first pass is refused at maxAgents.
    b.extraActive = 10;
    const first = h.manager.warm.tick();
    // The compute goes away while that pass is still running, and someone asks for a tick.
    b.extraActive = 0;
    const again = h.manager.warm.tick();
    await Promise.all([first, again]);
    await h.settle();
    // The asked-for pass ran after the refused one and filled the pool, without waiting for a timer.
    expect(b.spawns).toHaveLength(2);
    expect(h.manager.capBook().count('warm')).toBe(2);
  });
});
