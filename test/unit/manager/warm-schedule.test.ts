/**
 * A warm pool with a schedule, through the manager and a real dispatcher on a manual clock: the
 * pool grows at the scheduled moment (not a tick later), a scheduled drop frees idle agents at
 * once, and the moments follow Berlin's local time across the spring daylight-saving step.
 */
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../../src/util/clock.js';
import { useManagerHarnesses, type ManagerHarness } from '../../helpers/manager-harness.js';
import { bareMetal, scalerConfig } from '../../helpers/scaler-config.js';

const hs = useManagerHarnesses();
const at = (iso: string) => new Date(iso).getTime();

const config = scalerConfig({
  version: 1,
  scalers: [
    bareMetal('warm', [{ labels: ['linux'], resources: { requests: { cpus: 1, memory: '256m' } } }], {
      maxAgents: 10,
      warmPool: {
        enabled: true,
        size: 1,
        idleTimeoutSeconds: 3600,
        schedule: [
          { cron: '0 8 * * 1-5', size: 3, timezone: 'Europe/Berlin' },
          { cron: '0 18 * * 1-5', size: 0, timezone: 'Europe/Berlin' },
        ],
      },
    }),
  ],
});

/** Let every in-flight warm spawn start and register; returns the live (not destroyed) agents. */
async function fill(h: ManagerHarness): Promise<string[]> {
  const b = h.backend('warm');
  for (const id of b.pendingIds()) {
    b.resolveSpawn(id);
    await h.settle();
    const r = await h.registerAgent(id);
    if (!r.ok) throw new Error(r.reason);
  }
  await h.settle();
  return live(h);
}

function live(h: ManagerHarness): string[] {
  const gone = new Set(h.backend('warm').destroyedIds());
  return h
    .backend('warm')
    .spawns.map((s) => s.agentId)
    .filter((id) => !gone.has(id));
}

/** Advance to an instant (firing the timers on the way) and let the pool act. */
async function until(h: ManagerHarness, iso: string): Promise<void> {
  await h.advance(at(iso) - h.clock.now());
}

function pool(h: ManagerHarness) {
  const spec = h.manager.warm.specs()[0]!;
  return { target: h.manager.warm.targetOf(spec), next: h.manager.warm.nextChange(spec) };
}

describe('scheduled warm pools', () => {
  it('follow the schedule on a manual clock across the spring step', async () => {
    // Friday 26 March 2027, 06:00 UTC = 07:00 in Berlin (CET): the Thursday-evening size (0) holds.
    // Ten seconds off the minute, so the pool's 30 s ticks never land on a scheduled moment.
    const h = await hs.make({ config, clock: new ManualClock(at('2027-03-26T06:00:10Z')) });
    h.manager.warm.start();
    await h.settle();
    expect(pool(h)).toEqual({ target: 0, next: { atMs: at('2027-03-26T07:00:00Z'), size: 3, entry: 0 } });
    expect(h.backend('warm').spawns).toHaveLength(0);

    // One millisecond before 08:00 local nothing has happened; at 08:00 the pool fills to 3 at once,
    // with no 30 s tick in between.
    await until(h, '2027-03-26T06:59:59.999Z');
    expect(h.backend('warm').spawns).toHaveLength(0);
    await until(h, '2027-03-26T07:00:00Z');
    expect(h.backend('warm').pendingIds()).toHaveLength(3);
    expect(await fill(h)).toHaveLength(3);

    // 18:00 local (17:00 UTC): size 0. The idle timeout is an hour, but a scheduled drop does not
    // wait for it: all three idle agents are torn down at the moment itself.
    await until(h, '2027-03-26T16:59:59.999Z');
    expect(live(h)).toHaveLength(3);
    await until(h, '2027-03-26T17:00:00Z');
    expect(live(h)).toHaveLength(0);
    expect(h.manager.capBook().count('warm')).toBe(0);

    // The weekend stays at 0; Berlin moves to CEST on Sunday 28 March, so Monday's 08:00 is 06:00 UTC.
    expect(pool(h).next).toEqual({ atMs: at('2027-03-29T06:00:00Z'), size: 3, entry: 0 });
    await until(h, '2027-03-29T05:59:59.999Z');
    expect(live(h)).toHaveLength(0);
    await until(h, '2027-03-29T06:00:00Z');
    expect(h.backend('warm').pendingIds()).toHaveLength(3);
    expect(pool(h).target).toBe(3);
  });

  it('control: without a schedule the pool keeps its plain size through the same moments', async () => {
    const plain = scalerConfig({
      version: 1,
      scalers: [
        bareMetal('warm', [{ labels: ['linux'], resources: { requests: { cpus: 1, memory: '256m' } } }], {
          maxAgents: 10,
          warmPool: { enabled: true, size: 1, idleTimeoutSeconds: 3600 },
        }),
      ],
    });
    const h = await hs.make({ config: plain, clock: new ManualClock(at('2027-03-26T06:00:00Z')) });
    h.manager.warm.start();
    await h.settle();
    expect(await fill(h)).toHaveLength(1);
    await until(h, '2027-03-26T17:00:00Z');
    expect(live(h)).toHaveLength(1);
    expect(pool(h)).toEqual({ target: 1, next: null });
  });
});
