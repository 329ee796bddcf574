/**
 * Warm pools: an idle warm agent must not starve real work. With maxAgents 2 and both slots held by
 * idle warm agents of label set A, a job for label set B waited forever ("at maxAgents"). Now one
 * warm A agent is retired (destroy reason `idle`) and B spawns. Also: the pool skips exactly the
 * label sets `scaler validate` warns about (one predicate).
 */
import { describe, expect, it } from 'vitest';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { loadScalerConfigForPeople } from '../../../src/config/index.js';
import { backoffKey } from '../../../src/scaler/core/backoff.js';
import { useManagerHarnesses, type ManagerHarness } from '../../helpers/manager-harness.js';
import { bareMetal, scalerConfig } from '../../helpers/scaler-config.js';
import { tempDir } from '../../helpers/temp-dirs.js';

const hs = useManagerHarnesses();

/** Label set A has a declared size (warm), B has none (the pool skips it). */
function config(extra: Record<string, unknown> = {}) {
  return scalerConfig({
    version: 1,
    scalers: [
      bareMetal('bm', [{ labels: ['linux', 'a'], resources: { requests: { cpus: 1 } } }, ['linux', 'b']], {
        maxAgents: 2,
        warmPool: { enabled: true, size: 2, idleTimeoutSeconds: 600 },
        ...extra,
      }),
    ],
  });
}

async function warmUp(h: ManagerHarness): Promise<string[]> {
  h.manager.warm.start();
  await h.settle();
  const b = h.backend('bm');
  const ids = b.pendingIds();
  for (const id of ids) b.resolveSpawn(id);
  await h.settle();
  for (const id of ids) expect((await h.registerAgent(id)).ok).toBe(true);
  // Idle for a moment: an agent is not retired in the instant it registers.
  await h.advance(1_000);
  return ids;
}

describe('warm agents give way to queued work', () => {
  it('a job of another label set held by maxAgents retires one idle warm agent (reason idle) and spawns', async () => {
    const h = await hs.make({ config: config() });
    const warm = await warmUp(h);
    expect(warm).toHaveLength(2);
    const b = h.backend('bm');
    expect(b.spawns.map((s) => s.labelSet.includes('a'))).toEqual([true, true]);

    const { byName } = await h.submit({ job: { runsOn: ['linux', 'b'] } });
    await h.pump();
    const retired = b.destroys.filter((d) => warm.includes(d.agentId));
    expect(retired).toEqual([{ agentId: expect.any(String), reason: 'idle', known: true }]);
    const bound = b.spawns.filter((s) => s.boundJobId === byName.job);
    expect(bound).toHaveLength(1);
    expect([...bound[0]!.labelSet].sort()).toEqual(['b', 'linux']);
    expect(h.manager.capBook().count('bm')).toBe(2);

    // The pool that gave way does not take the slot back, and nothing else is retired.
    await h.manager.warm.tick();
    await h.pump();
    expect(b.destroys.filter((d) => warm.includes(d.agentId))).toHaveLength(1);
    expect(h.manager.capBook().count('bm')).toBe(2);
  });

  it('a job the warm agents could take, or one blocked by something else, retires nothing', async () => {
    const h = await hs.make({ config: config() });
    const warm = await warmUp(h);
    const b = h.backend('bm');
    // Same label set as the pool: the warm agent takes it, no spawn and no retire.
    const { byName } = await h.submit({ job: { runsOn: ['linux', 'a'] } });
    expect(h.assigned(warm[0]!).concat(h.assigned(warm[1]!))).toContain(byName.job);
    // A label set no scaler serves: no cap holds it, so nothing is retired for it.
    await h.submit({ other: { runsOn: ['windows'] } });
    await h.pump();
    expect(b.destroys).toEqual([]);
  });

  it('a job held by backoff, not by a cap, retires nothing', async () => {
    const h = await hs.make({ config: config() });
    await warmUp(h);
    const now = h.clock.now();
    h.manager.backoff.recordFailure(
      backoffKey('bm', 'b,linux'),
      now,
      'scaler-bare-metal-gone',
      { kind: 'binary-missing', message: 'agent executable not found' },
      { transient: false },
    );
    const { byName } = await h.submit({ job: { runsOn: ['linux', 'b'] } });
    await h.pump();
    expect(h.backend('bm').destroys).toEqual([]);
    expect(h.d.queue.get(byName.job!)?.waiting).toMatch(/label set \[b,linux\] fail/);
  });

  it('the pool skips exactly the label sets scaler validate warns about', async () => {
    const h = await hs.make({ config: config() });
    expect(h.manager.warm.specs().map((s) => s.labelSetKey)).toEqual(['a,linux']);
    expect(h.manager.warm.skipped()).toEqual([
      { scalerName: 'bm', labelSetKey: 'b,linux', reason: expect.stringContaining('declare resources') },
    ]);
    // The same entry as YAML, through what `kici-admin scaler validate` runs.
    const path = join(await tempDir('kici-warm-'), 'scalers.yaml');
    await writeFile(path, stringify(config()));
    const r = await loadScalerConfigForPeople(path);
    if (!r.ok) throw new Error(r.problems.join('\n'));
    const warnings = r.warnings;
    const skips = warnings.filter((w) => w.includes('the warm pool skips this label set'));
    expect(skips).toHaveLength(1);
    expect(skips[0]).toContain('labelSets[1]');
  });
});
