import { describe, expect, it } from 'vitest';
import {
  FAILURE_RING_SIZE,
  FailureTracker,
  type FailureRecord,
} from '../../../src/scaler/core/failure-tracker.js';

const T0 = 1_700_000_000_000;
const rec = (over: Partial<FailureRecord>): FailureRecord => ({
  scalerName: 'bm',
  backendType: 'bare-metal',
  bound: true,
  kind: 'exited-before-register',
  detail: 'exit code 1',
  atMs: T0,
  ...over,
});

describe('FailureTracker', () => {
  it(`keeps the newest ${FAILURE_RING_SIZE} records`, () => {
    const t = new FailureTracker();
    for (let i = 0; i < 300; i++) t.record(rec({ atMs: T0 + i, detail: `#${i}` }));
    const all = t.records();
    expect(t.size).toBe(256);
    expect(all).toHaveLength(256);
    expect(all[0]?.detail).toBe('#44');
    expect(all.at(-1)?.detail).toBe('#299');
  });

  it('groups records inside the window per scaler with bound/unbound counts and the latest error', () => {
    const t = new FailureTracker();
    t.record(rec({ atMs: T0 - 120_000, detail: 'too old' }));
    t.record(rec({ atMs: T0 - 50_000, bound: true, kind: 'binary-missing', detail: 'first' }));
    t.record(rec({ atMs: T0 - 10_000, bound: false, kind: 'spawn-timeout', detail: 'latest' }));
    t.record(rec({ atMs: T0 - 30_000, bound: true, detail: 'recorded late but older' }));
    t.record(rec({ scalerName: 'ev', backendType: 'event', bound: false, atMs: T0 - 1_000, detail: 'e' }));
    const out = t.recentByScaler(60_000, T0);
    expect([...out.keys()].sort()).toEqual(['bm', 'ev']);
    expect(out.get('bm')).toEqual({
      boundCount: 2,
      unboundCount: 1,
      lastError: { kind: 'spawn-timeout', detail: 'latest' },
      lastAtMs: T0 - 10_000,
      backendType: 'bare-metal',
    });
    expect(out.get('ev')).toMatchObject({ boundCount: 0, unboundCount: 1, backendType: 'event' });
  });

  it('excludes a record exactly at the window edge and returns nothing when empty', () => {
    const t = new FailureTracker();
    expect(t.recentByScaler(1_000, T0).size).toBe(0);
    t.record(rec({ atMs: T0 - 1_000 }));
    expect(t.recentByScaler(1_000, T0).size).toBe(0);
    expect(t.recentByScaler(1_001, T0).size).toBe(1);
  });

  it('works with a tiny ring and refuses a zero capacity', () => {
    const t = new FailureTracker(2);
    t.record(rec({ detail: 'a' }));
    t.record(rec({ detail: 'b' }));
    t.record(rec({ detail: 'c' }));
    expect(t.records().map((r) => r.detail)).toEqual(['b', 'c']);
    expect(() => new FailureTracker(0)).toThrow(RangeError);
  });
});
