import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { LatencyProfile } from '../../../src/scaler/sim/profile.js';

describe('a latency that follows the host over time', () => {
  it('is the mean of the samples nearest in time', () => {
    const p = new LatencyProfile(
      [
        { atMs: 0, ms: 100 },
        { atMs: 10, ms: 100 },
        { atMs: 1000, ms: 900 },
        { atMs: 1010, ms: 700 },
      ],
      2,
    );
    expect(p.valueAt(5)).toBe(100);
    expect(p.valueAt(1005)).toBe(800);
    // Past the last sample: the last two.
    expect(p.valueAt(50_000)).toBe(800);
    expect(new LatencyProfile([]).valueAt(3)).toBe(0);
  });

  it('stays within the samples it was given, whatever the moment', () => {
    fc.assert(
      fc.property(
        fc.array(
          fc.record({ atMs: fc.integer({ min: 0, max: 1e6 }), ms: fc.integer({ min: 0, max: 1e5 }) }),
          {
            minLength: 1,
            maxLength: 50,
          },
        ),
        fc.integer({ min: -1e3, max: 2e6 }),
        (samples, t) => {
          const v = new LatencyProfile(samples).valueAt(t);
          const values = samples.map((s) => s.ms);
          expect(v).toBeGreaterThanOrEqual(Math.min(...values));
          expect(v).toBeLessThanOrEqual(Math.max(...values));
        },
      ),
    );
  });
});
