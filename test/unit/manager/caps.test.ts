/**
 * Caps and resources through the manager: count caps over max(live, reservations), resource caps
 * billed on requests, limits handed to the backend, and the resolution cascade.
 */
import { describe, expect, it } from 'vitest';
import type { ScaleJob, ScaleResult } from '../../../src/scaler/types.js';
import { useManagerHarnesses, type ManagerHarness } from '../../helpers/manager-harness.js';
import { bareMetal } from '../../helpers/scaler-config.js';

const hs = useManagerHarnesses();
const MiB = 1024 * 1024;
const GiB = 1024 * MiB;
let seq = 0;
const job = (runsOn: string[], extra: Partial<ScaleJob> = {}): ScaleJob => ({
  id: `job-${++seq}`,
  runId: 'run-1',
  runsOn,
  ...extra,
});

async function scale(h: ManagerHarness, j: ScaleJob): Promise<ScaleResult> {
  const r = await h.manager.requestScale(j);
  await h.settle();
  return r;
}
const actions = (rs: ScaleResult[]) => rs.map((r) => r.action);

describe('count caps', () => {
  it('maxAgents caps one scaler', async () => {
    const h = await hs.make({
      dispatcher: false,
      config: { version: 1, scalers: [bareMetal('alpha', [['linux']], { maxAgents: 2 })] },
    });
    const rs = [
      await scale(h, job(['linux'])),
      await scale(h, job(['linux'])),
      await scale(h, job(['linux'])),
    ];
    expect(actions(rs)).toEqual(['spawning', 'spawning', 'at-capacity']);
    expect(rs[2]).toMatchObject({ reason: expect.stringContaining('maxAgents (2/2)') });
    expect(h.backend('alpha').spawns).toHaveLength(2);
  });

  it('globalMaxAgents caps the sum over scalers', async () => {
    const h = await hs.make({
      dispatcher: false,
      config: {
        version: 1,
        globalMaxAgents: 3,
        scalers: [
          bareMetal('alpha', [['a']], { maxAgents: 5 }),
          bareMetal('beta', [['b']], { maxAgents: 5 }),
        ],
      },
    });
    const rs = [
      await scale(h, job(['a'])),
      await scale(h, job(['b'])),
      await scale(h, job(['a'])),
      await scale(h, job(['b'])),
      await scale(h, job(['a'])),
    ];
    expect(actions(rs)).toEqual(['spawning', 'spawning', 'spawning', 'at-capacity', 'at-capacity']);
    expect(rs[3]).toMatchObject({ reason: expect.stringContaining('globalMaxAgents') });
  });

  it('a backend reporting more live agents than there are reservations blocks (max, not reservations alone)', async () => {
    const h = await hs.make({
      dispatcher: false,
      config: {
        version: 1,
        globalMaxAgents: 4,
        scalers: [
          bareMetal('alpha', [['a']], { maxAgents: 2 }),
          bareMetal('beta', [['b']], { maxAgents: 9 }),
        ],
      },
    });
    h.backend('alpha').extraActive = 2;
    expect((await scale(h, job(['a']))).action).toBe('at-capacity');
    expect(h.manager.capBook().count()).toBe(0);
    // Live compute counts globally too: beta may add agents until live (2 + beta's) reaches 4.
    expect((await scale(h, job(['b']))).action).toBe('spawning');
    expect((await scale(h, job(['b']))).action).toBe('spawning');
    // live = 2 (alpha) + 2 (beta spawning) = 4 ≥ 4, although only 2 reservations exist.
    expect((await scale(h, job(['b']))).action).toBe('at-capacity');
  });

  it('reservations still queued for a spawn slot count although no backend counts them yet', async () => {
    const h = await hs.make({
      dispatcher: false,
      config: {
        version: 1,
        scalers: [bareMetal('alpha', [['a']], { maxAgents: 3, maxConcurrentSpawns: 1 })],
      },
    });
    const rs = [];
    for (let i = 0; i < 4; i++) rs.push(await scale(h, job(['a'])));
    expect(actions(rs)).toEqual(['spawning', 'spawning', 'spawning', 'at-capacity']);
    expect(h.backend('alpha').getActiveCount()).toBe(1);
    expect(h.manager.capBook().count('alpha')).toBe(3);
  });

  it('a failed spawn gives its slot back at once', async () => {
    const h = await hs.make({
      dispatcher: false,
      config: { version: 1, scalers: [bareMetal('alpha', [['a'], ['b']], { maxAgents: 1 })] },
    });
    const first = await scale(h, job(['a']));
    expect((await scale(h, job(['b']))).action).toBe('at-capacity');
    h.backend('alpha').failSpawn((first as { agentId: string }).agentId, new Error('boom'));
    await h.settle();
    expect(h.manager.capBook().count()).toBe(0);
    expect((await scale(h, job(['b']))).action).toBe('spawning');
  });
});

describe('resource caps and resolution', () => {
  const sized = {
    labels: ['linux'],
    resources: { requests: { cpus: 1, memory: '512m' }, limits: { cpus: 2, memory: '1g' } },
  };

  it('caps bill requests while the backend receives the limits', async () => {
    const h = await hs.make({
      dispatcher: false,
      config: { version: 1, scalers: [bareMetal('alpha', [sized], { resourceCap: { maxCpu: 2.5 } })] },
    });
    const rs = [
      await scale(h, job(['linux'])),
      await scale(h, job(['linux'])),
      await scale(h, job(['linux'])),
    ];
    // Billed on limits (2 cpus) only one agent would fit under 2.5; billed on requests (1 cpu) two do.
    expect(actions(rs)).toEqual(['spawning', 'spawning', 'at-capacity']);
    expect(rs[2]).toMatchObject({ reason: expect.stringContaining('cpu cap') });
    for (const req of h.backend('alpha').spawns) expect(req.limits).toEqual({ cpus: 2, memBytes: GiB });
    expect(h.manager.capBook().usage('alpha')).toEqual({ cpus: 2, memBytes: GiB });
    expect(h.manager.capBook().usage()).toEqual({ cpus: 2, memBytes: GiB });
    const rows = await h.reservationRows();
    expect(rows.map((r) => [r.cpu_units, Number(r.mem_bytes)])).toEqual([
      [1, 512 * MiB],
      [1, 512 * MiB],
    ]);
  });

  it('the per-scaler memory cap refuses past the cap', async () => {
    const h = await hs.make({
      dispatcher: false,
      config: { version: 1, scalers: [bareMetal('alpha', [sized], { resourceCap: { maxMemory: '1g' } })] },
    });
    const rs = [
      await scale(h, job(['linux'])),
      await scale(h, job(['linux'])),
      await scale(h, job(['linux'])),
    ];
    expect(actions(rs)).toEqual(['spawning', 'spawning', 'at-capacity']);
    expect(rs[2]).toMatchObject({ reason: expect.stringContaining('memory cap') });
  });

  it('globalResourceCap sums requests across scalers', async () => {
    const h = await hs.make({
      dispatcher: false,
      config: {
        version: 1,
        globalResourceCap: { maxCpu: 1.5 },
        scalers: [
          bareMetal('alpha', [{ ...sized, labels: ['a'] }]),
          bareMetal('beta', [{ ...sized, labels: ['b'] }]),
        ],
      },
    });
    expect((await scale(h, job(['a']))).action).toBe('spawning');
    const r = await scale(h, job(['b']));
    expect(r).toMatchObject({ action: 'at-capacity', reason: expect.stringContaining('global cpu cap') });
    const g = await hs.make({
      dispatcher: false,
      config: {
        version: 1,
        globalResourceCap: { maxMemory: '768m' },
        scalers: [
          bareMetal('alpha', [{ ...sized, labels: ['a'] }]),
          bareMetal('beta', [{ ...sized, labels: ['b'] }]),
        ],
      },
    });
    expect((await scale(g, job(['a']))).action).toBe('spawning');
    expect(await scale(g, job(['b']))).toMatchObject({
      action: 'at-capacity',
      reason: expect.stringContaining('global memory cap'),
    });
  });

  it('resources cascade job → label set → defaults → 0, side by side', async () => {
    const h = await hs.make({
      dispatcher: false,
      config: {
        version: 1,
        defaults: { resources: { limits: { cpus: 0.5, memory: '256m' } } },
        scalers: [
          bareMetal('alpha', [{ labels: ['ls'], resources: { requests: { memory: '1g' } } }, ['bare']]),
        ],
      },
    });
    const rs: ScaleResult[] = [];
    // Nothing from the job: cpus from defaults, memory from the label set (a side given alone is mirrored).
    rs.push(await scale(h, job(['ls'])));
    // The job's cpus win over the defaults; memory still from the label set.
    rs.push(await scale(h, job(['ls'], { resources: { limits: { cpus: 2 } } })));
    // A set without resources falls through to the defaults entirely.
    rs.push(await scale(h, job(['bare'])));
    const byId = (r: ScaleResult) => h.manager.capBook().get((r as { agentId: string }).agentId)!;
    expect(byId(rs[0]!).requests).toEqual({ cpus: 0.5, memBytes: GiB });
    expect(byId(rs[1]!).requests).toEqual({ cpus: 2, memBytes: GiB });
    expect(byId(rs[2]!).requests).toEqual({ cpus: 0.5, memBytes: 256 * MiB });
    const limits = h.backend('alpha').spawns.map((s) => s.limits);
    expect(limits).toEqual([
      { cpus: 0.5, memBytes: GiB },
      { cpus: 2, memBytes: GiB },
      { cpus: 0.5, memBytes: 256 * MiB },
    ]);
  });

  it('with nothing declared anywhere the reservation is zero and the backend gets no limits', async () => {
    const h = await hs.make({
      dispatcher: false,
      config: { version: 1, scalers: [bareMetal('alpha', [['linux']], { resourceCap: { maxCpu: 1 } })] },
    });
    for (let i = 0; i < 3; i++) expect((await scale(h, job(['linux']))).action).toBe('spawning');
    expect(h.backend('alpha').spawns.every((s) => s.limits === undefined)).toBe(true);
    expect(h.manager.capBook().usage('alpha')).toEqual({ cpus: 0, memBytes: 0 });
  });

  it('resources declared in a run file reach the reservation through the dispatcher', async () => {
    const h = await hs.make({
      config: { version: 1, scalers: [bareMetal('alpha', [['linux']], { resourceCap: { maxCpu: 3 } })] },
    });
    await h.submit({
      a: { runsOn: ['linux'], resources: { limits: { cpus: 2, memory: '1g' } } },
      b: { runsOn: ['linux'], resources: { limits: { cpus: 2 } } },
    });
    // 2 + 2 > 3: one spawn, the other waits on the cpu cap.
    expect(h.backend('alpha').spawns).toHaveLength(1);
    expect(h.backend('alpha').spawns[0]!.limits).toEqual({ cpus: 2, memBytes: GiB });
    const waiting = h.d.queue.all().filter((j) => !h.manager.isProvisioning(j.id));
    expect(waiting).toHaveLength(1);
    expect(waiting[0]!.waiting).toContain('cpu cap');
  });
});
