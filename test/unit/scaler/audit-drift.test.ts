import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { confirmedDrift, countDrift, diffAudit, type AuditInput } from '../../../src/scaler/audit/drift.js';
import type { InventoryItem } from '../../../src/scaler/types.js';

const NOW = 1_000_000;
const base: AuditInput = {
  records: [],
  inventories: [],
  recordedAnywhere: new Set(),
  liveTokens: [],
  tracked: new Set(),
  nowMs: NOW,
  graceMs: 30_000,
};

const rec = (agentId: string, scaler = 'bm', ageMs = 60_000) => ({
  agentId,
  scaler,
  spawnedAtMs: NOW - ageMs,
});
const proc = (agentId: string | null, ref = '1'): InventoryItem => ({ kind: 'process', agentId, ref });

describe('diffAudit', () => {
  it('finds nothing when every record has compute and every piece of compute a record', () => {
    const r = diffAudit({
      ...base,
      records: [rec('a'), rec('b')],
      inventories: [{ scaler: 'bm', items: [proc('a', '10'), proc('b', '11')] }],
      recordedAnywhere: new Set(['a', 'b']),
      liveTokens: ['a', 'b'],
    });
    expect(r).toEqual({ drift: [], unchecked: [] });
  });

  it('reports a record whose compute is gone, and compute no record accounts for', () => {
    const r = diffAudit({
      ...base,
      records: [rec('gone')],
      inventories: [
        { scaler: 'bm', items: [proc('extra', '42'), { kind: 'tap', agentId: null, ref: 'kici-tap7' }] },
      ],
      recordedAnywhere: new Set(['gone']),
    });
    expect(r.drift).toEqual([
      { kind: 'missing-compute', resource: 'record', scaler: 'bm', agentId: 'gone', ref: 'gone' },
      { kind: 'unrecorded-compute', resource: 'process', scaler: 'bm', agentId: 'extra', ref: '42' },
      { kind: 'unrecorded-compute', resource: 'tap', scaler: 'bm', agentId: null, ref: 'kici-tap7' },
    ]);
  });

  it('leaves a record inside its grace alone (its compute may still be starting)', () => {
    const r = diffAudit({
      ...base,
      records: [rec('young', 'bm', 1_000)],
      inventories: [{ scaler: 'bm', items: [] }],
    });
    expect(r.drift).toEqual([]);
  });

  it('does not judge records of a scaler that could not answer, and names it', () => {
    const r = diffAudit({
      ...base,
      records: [rec('a', 'docker'), rec('b', 'cloud')],
      inventories: [
        { scaler: 'docker', error: 'engine unreachable' },
        { scaler: 'cloud', unsupported: true },
      ],
    });
    expect(r.drift).toEqual([]);
    expect(r.unchecked).toEqual([
      { scaler: 'docker', reason: 'engine unreachable' },
      { scaler: 'cloud', reason: 'cannot list its compute' },
    ]);
  });

  it('reports a live token with no record and no compute; spares one a peer records or a spawn holds', () => {
    const r = diffAudit({
      ...base,
      liveTokens: ['stray', 'peer', 'starting'],
      recordedAnywhere: new Set(['peer']),
      tracked: new Set(['starting']),
    });
    expect(r.drift).toEqual([
      { kind: 'orphan-token', resource: 'token', scaler: null, agentId: 'stray', ref: 'stray' },
    ]);
  });

  it('counts compute a peer records, or a spawn in flight holds, as owned', () => {
    const r = diffAudit({
      ...base,
      inventories: [{ scaler: 'ev', items: [{ kind: 'provision', agentId: 'p', ref: 'p' }, proc('s')] }],
      recordedAnywhere: new Set(['p']),
      tracked: new Set(['s']),
    });
    expect(r.drift).toEqual([]);
  });

  it('reports a stopped leftover even with a record, unless its agent is being torn down', () => {
    const stopped = (agentId: string): InventoryItem => ({
      kind: 'container',
      agentId,
      ref: `c-${agentId}`,
      stopped: true,
    });
    const r = diffAudit({
      ...base,
      records: [rec('rec', 'dk')],
      inventories: [{ scaler: 'dk', items: [stopped('rec'), stopped('gone'), stopped('leaving')] }],
      recordedAnywhere: new Set(['rec']),
      tracked: new Set(['leaving']),
    });
    expect(r.drift).toEqual([
      { kind: 'missing-compute', resource: 'record', scaler: 'dk', agentId: 'rec', ref: 'rec' },
      {
        kind: 'unrecorded-compute',
        resource: 'container',
        scaler: 'dk',
        agentId: 'gone',
        ref: 'c-gone',
        stopped: true,
      },
      {
        kind: 'unrecorded-compute',
        resource: 'container',
        scaler: 'dk',
        agentId: 'rec',
        ref: 'c-rec',
        stopped: true,
      },
    ]);
  });

  it('property: drift is empty exactly when records and inventory name the same agents', () => {
    const ids = fc.uniqueArray(fc.constantFrom('a', 'b', 'c', 'd', 'e', 'f'), { maxLength: 6 });
    fc.assert(
      fc.property(ids, ids, (stored, live) => {
        const r = diffAudit({
          ...base,
          records: stored.map((id) => rec(id)),
          inventories: [{ scaler: 'bm', items: live.map((id) => proc(id)) }],
          recordedAnywhere: new Set(stored),
        });
        const same = stored.length === live.length && stored.every((id) => live.includes(id));
        expect(r.drift.length === 0).toBe(same);
        // Each agent in only one of the two sides is reported once, on the right side.
        for (const d of r.drift) {
          if (d.kind === 'missing-compute') expect(live).not.toContain(d.agentId);
          else expect(stored).not.toContain(d.agentId);
        }
        expect(r.drift.length).toBe(
          stored.filter((id) => !live.includes(id)).length + live.filter((id) => !stored.includes(id)).length,
        );
      }),
    );
  });
});

describe('confirmedDrift and countDrift', () => {
  const a = {
    kind: 'missing-compute' as const,
    resource: 'record' as const,
    scaler: 'bm',
    agentId: 'a',
    ref: 'a',
  };
  const b = {
    kind: 'orphan-token' as const,
    resource: 'token' as const,
    scaler: null,
    agentId: 'b',
    ref: 'b',
  };

  it('keeps only drift seen in both snapshots (a teardown in flight shows in one)', () => {
    expect(confirmedDrift([a, b], [b])).toEqual([b]);
    expect(confirmedDrift([a], [b])).toEqual([]);
  });

  it('counts by kind with every kind present', () => {
    expect(Object.fromEntries(countDrift([a, b, b]))).toEqual({
      'missing-compute': 1,
      'unrecorded-compute': 0,
      'orphan-token': 2,
    });
  });
});
