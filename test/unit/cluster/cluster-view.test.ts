/**
 * The cluster view's merges: every instance's rows, each marked with its instance and presence;
 * the answering instance's own part first; an agent that moved is shown once, where it is alive.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  mergeAgents,
  mergeDiagnose,
  mergeScalerStatus,
  partFingerprint,
  type InstancePart,
  type PeerPart,
} from '../../../src/cluster/cluster-view.js';
import type { InstanceState } from '../../../src/cluster/instances-repo.js';
import { instanceCell, manyInstances } from '../../../src/cli/admin/instance-column.js';
import { partial, readPeerParts } from '../../../src/cluster/peer-read.js';

const part = (over: Partial<InstancePart> = {}): InstancePart => ({
  scalerStatus: { configured: true, globalActive: 0, scalers: [] },
  diagnose: { configured: true, healthy: true, scalers: [], checks: [] },
  agents: [],
  ...over,
});

const peer = (instance: string, state: InstanceState, p: InstancePart, heartbeatAgeMs = 100): PeerPart => ({
  instance,
  state,
  heartbeatAgeMs,
  part: p,
});

describe('mergeAgents', () => {
  it('lists own agents first, then each peer, alive ones before dead, every row marked', () => {
    const merged = mergeAgents(
      'a',
      [{ id: 'x1' }],
      [
        peer('c', 'dead', part({ agents: [{ id: 'z1' }] })),
        peer('b', 'alive', part({ agents: [{ id: 'y1' }, { id: 'y2' }] })),
        peer('d', 'stopped', part({ agents: [{ id: 'w1' }] })),
      ],
    );
    expect(merged).toEqual([
      { id: 'x1', instance: 'a', instanceState: 'alive' },
      { id: 'y1', instance: 'b', instanceState: 'alive' },
      { id: 'y2', instance: 'b', instanceState: 'alive' },
      { id: 'z1', instance: 'c', instanceState: 'dead' },
    ]);
  });

  it('shows an agent that moved from a dead instance once, on the instance it is connected to now', () => {
    const merged = mergeAgents(
      'a',
      [],
      [
        peer('dead-one', 'dead', part({ agents: [{ id: 'moved', state: 'busy' }] })),
        peer('b', 'alive', part({ agents: [{ id: 'moved', state: 'idle' }] })),
      ],
    );
    expect(merged).toEqual([{ id: 'moved', state: 'idle', instance: 'b', instanceState: 'alive' }]);
  });

  it('never shows its own published row as a peer', () => {
    const merged = mergeAgents('a', [{ id: 'x' }], [peer('a', 'alive', part({ agents: [{ id: 'old' }] }))]);
    expect(merged.map((r) => r.id)).toEqual(['x']);
  });

  it('property: ids are unique, own rows all kept, every alive peer agent shown', () => {
    const ids = fc.array(fc.constantFrom('a1', 'a2', 'a3', 'a4', 'a5'), { maxLength: 5 });
    const peers = fc.array(
      fc.record({
        instance: fc.constantFrom('p1', 'p2', 'p3'),
        state: fc.constantFrom<InstanceState>('alive', 'dead', 'stopped'),
        ids,
      }),
      { maxLength: 4 },
    );
    fc.assert(
      fc.property(ids, peers, (own, ps) => {
        const ownRows = [...new Set(own)].map((id) => ({ id }));
        const merged = mergeAgents(
          'self',
          ownRows,
          ps.map((p) => peer(p.instance, p.state, part({ agents: p.ids.map((id) => ({ id })) }))),
        );
        const seen = merged.map((r) => r.id);
        expect(new Set(seen).size).toBe(seen.length);
        for (const r of ownRows) expect(merged.find((m) => m.id === r.id)?.instance).toBe('self');
        for (const p of ps.filter((x) => x.state === 'alive'))
          for (const id of p.ids) expect(merged.find((m) => m.id === id)?.instanceState).toBe('alive');
        for (const m of merged) expect(m.instanceState).not.toBe('stopped');
      }),
    );
  });
});

describe('mergeScalerStatus', () => {
  it('keeps its own top-level figures, marks every scaler row and lists each instance', () => {
    const own = { configured: true, globalActive: 1, scalers: [{ name: 'bm', active: 1 }] };
    const merged = mergeScalerStatus('a', own, [
      peer(
        'b',
        'dead',
        part({ scalerStatus: { configured: true, globalActive: 3, scalers: [{ name: 'bm', active: 3 }] } }),
      ),
    ]);
    expect(merged.globalActive).toBe(1);
    expect(merged.scalers).toEqual([
      { name: 'bm', active: 1, instance: 'a', instanceState: 'alive' },
      { name: 'bm', active: 3, instance: 'b', instanceState: 'dead' },
    ]);
    expect(merged.instances).toEqual([
      { configured: true, globalActive: 1, instance: 'a', instanceState: 'alive' },
      { configured: true, globalActive: 3, instance: 'b', instanceState: 'dead' },
    ]);
  });

  it('counts as configured when only a peer has scalers', () => {
    const merged = mergeScalerStatus('a', { configured: false, scalers: [] }, [peer('b', 'alive', part())]);
    expect(merged.configured).toBe(true);
  });
});

describe('mergeDiagnose', () => {
  const unhealthy = part({
    diagnose: {
      configured: true,
      healthy: false,
      scalers: [{ name: 'bm', healthy: false }],
      checks: [{ name: 'scaler:bm', status: 'FAIL', message: 'x' }],
    },
  });

  it('an alive peer with a problem makes the cluster unhealthy', () => {
    const own = { configured: true, healthy: true, scalers: [{ name: 'bm', healthy: true }], checks: [] };
    const merged = mergeDiagnose('a', own, [peer('b', 'alive', unhealthy)]);
    expect(merged.healthy).toBe(false);
    expect(merged.scalers.map((s) => (s as { instance: string }).instance)).toEqual(['a', 'b']);
    expect(merged.checks).toEqual([
      { name: 'scaler:bm', status: 'FAIL', message: 'x', instance: 'b', instanceState: 'alive' },
    ]);
  });

  it('a dead peer is a warning, and its stale problems do not fail the cluster', () => {
    const own = { configured: true, healthy: true, scalers: [], checks: [] };
    const merged = mergeDiagnose('a', own, [peer('b', 'dead', unhealthy, 42_000)]);
    expect(merged.healthy).toBe(true);
    expect(merged.checks.at(-1)).toEqual({
      name: 'instance:b',
      status: 'WARN',
      message: 'instance b is dead (no heartbeat for 42s); its rows are as it last published them',
      instance: 'b',
      instanceState: 'dead',
    });
  });
});

describe('the INSTANCE column', () => {
  it('is shown only when rows come from more than one instance', () => {
    expect(manyInstances([{ instance: 'a' }, { instance: 'a' }])).toBe(false);
    expect(manyInstances([{}, {}])).toBe(false);
    expect(manyInstances([{ instance: 'a' }, { instance: 'b' }])).toBe(true);
  });

  it('names the state of an instance that is not alive', () => {
    expect(instanceCell({ instance: 'a', instanceState: 'alive' })).toBe('a');
    expect(instanceCell({ instance: 'b', instanceState: 'dead' })).toBe('b (dead)');
    expect(instanceCell({})).toBe('-');
  });
});

describe('reading the peers’ parts', () => {
  it('a failed read leaves this instance’s rows and says why; no reader means no peers', async () => {
    const failed = await readPeerParts(() => Promise.reject(new Error('connection refused')));
    expect(failed.parts).toEqual([]);
    expect(partial(failed)).toEqual({
      peersUnavailable: "the other instances' parts could not be read: connection refused",
    });
    expect(await readPeerParts(undefined)).toEqual({ parts: [] });
    const ok = await readPeerParts(() => Promise.resolve([peer('b', 'alive', part())]));
    expect([ok.parts.length, partial(ok)]).toEqual([1, {}]);
  });
});

describe('partFingerprint', () => {
  it('ignores what moves with the clock alone, and sees every other change', () => {
    const at = (idleMs: number, state = 'idle') =>
      part({ agents: [{ id: 'a', state, idleMs, uptimeMs: idleMs + 5, connectedAt: `t${idleMs}` }] });
    expect(partFingerprint(at(1000))).toBe(partFingerprint(at(9000)));
    expect(partFingerprint(at(1000))).not.toBe(partFingerprint(at(1000, 'busy')));
  });
});
