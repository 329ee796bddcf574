import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  backoffKey,
  COUNTED_AGENTS_CAP,
  parseBackoffKey,
  ProvisionBackoff,
} from '../../../src/scaler/core/backoff.js';

const T0 = 1_700_000_000_000;
const KEY = backoffKey('bm', 'linux,x64');

describe('ProvisionBackoff', () => {
  it('doubles from 30 s and caps at 900 s', () => {
    const b = new ProvisionBackoff();
    const delays = Array.from({ length: 8 }, () => b.recordFailure(KEY, T0).delayMs);
    expect(delays).toEqual([30_000, 60_000, 120_000, 240_000, 480_000, 900_000, 900_000, 900_000]);
  });

  it('blocks until the deferral ends, then lets one attempt through', () => {
    const b = new ProvisionBackoff();
    const s = b.recordFailure(KEY, T0);
    expect(s).toMatchObject({ consecutive: 1, deferUntilMs: T0 + 30_000, failingConsistently: false });
    expect(b.check(KEY, T0 + 10_000)).toMatchObject({ blocked: true, retryAfterMs: 20_000, consecutive: 1 });
    expect(b.check(KEY, T0 + 30_000)).toEqual({ blocked: false });
  });

  it('a success resets the schedule', () => {
    const b = new ProvisionBackoff();
    b.recordFailure(KEY, T0);
    b.recordFailure(KEY, T0);
    expect(b.recordSuccess(KEY)).toBe(true);
    expect(b.recordSuccess(KEY)).toBe(false);
    expect(b.check(KEY, T0)).toEqual({ blocked: false });
    expect(b.recordFailure(KEY, T0).delayMs).toBe(30_000);
  });

  it('keeps label sets and scalers independent', () => {
    const b = new ProvisionBackoff();
    const other = backoffKey('bm', 'gpu,linux');
    b.recordFailure(KEY, T0);
    b.recordFailure(KEY, T0);
    expect(b.check(other, T0)).toEqual({ blocked: false });
    expect(b.recordFailure(other, T0).consecutive).toBe(1);
    expect(b.recordFailure(backoffKey('docker', 'linux,x64'), T0).consecutive).toBe(1);
    b.recordSuccess(KEY);
    expect(b.check(other, T0)).toMatchObject({ blocked: true });
  });

  it('counts a dead provision once per agent id, even after a success', () => {
    const b = new ProvisionBackoff();
    expect(b.recordFailure(KEY, T0, 'agent-1').counted).toBe(true);
    const dup = b.recordFailure(KEY, T0 + 5_000, 'agent-1');
    expect(dup).toMatchObject({ counted: false, consecutive: 1, deferUntilMs: T0 + 30_000 });
    expect(b.recordFailure(KEY, T0, 'agent-2').consecutive).toBe(2);
    b.recordSuccess(KEY);
    // The leader's reaper reports agent-1 again after recovery: must not re-arm.
    expect(b.recordFailure(KEY, T0, 'agent-1')).toMatchObject({ counted: false, consecutive: 0 });
    expect(b.check(KEY, T0)).toEqual({ blocked: false });
  });

  it(`remembers at most ${COUNTED_AGENTS_CAP} agent ids per key, dropping the oldest`, () => {
    const b = new ProvisionBackoff();
    for (let i = 0; i <= COUNTED_AGENTS_CAP; i++) b.recordFailure(KEY, T0, `a${i}`);
    expect(b.recordFailure(KEY, T0, `a${COUNTED_AGENTS_CAP}`).counted).toBe(false); // newest kept
    expect(b.recordFailure(KEY, T0, 'a1').counted).toBe(false); // still inside the window
    expect(b.recordFailure(KEY, T0, 'a0').counted).toBe(true); // oldest was dropped
  });

  it('explains the refusal in a sentence', () => {
    const b = new ProvisionBackoff();
    const err = { kind: 'binary-missing', message: 'agent executable not found: /opt/kici-agent' };
    b.recordFailure(KEY, T0, undefined, err);
    const first = b.check(KEY, T0);
    expect(first.blocked && first.reason).toBe(
      'scaler "bm" label set [linux,x64] failed to start an agent ' +
        '(last: binary-missing: agent executable not found: /opt/kici-agent); retrying in 30s',
    );
    b.recordFailure(KEY, T0);
    b.recordFailure(KEY, T0);
    const third = b.check(KEY, T0 + 500);
    expect(third).toMatchObject({ blocked: true, consecutive: 3, lastError: err });
    expect(third.blocked && third.reason).toBe(
      'scaler "bm" label set [linux,x64] failed to start an agent 3 times in a row ' +
        '(last: binary-missing: agent executable not found: /opt/kici-agent); retrying in 120s',
    );
    b.recordFailure(KEY, T0);
    const fifth = b.recordFailure(KEY, T0);
    expect(fifth.failingConsistently).toBe(true);
    const c = b.check(KEY, T0);
    expect(c.blocked && c.reason).toContain('`kici-admin diagnose` shows the cause on the scaler:bm row');
  });

  it('lists every armed key in the snapshot', () => {
    const b = new ProvisionBackoff();
    b.recordFailure(KEY, T0, undefined, { kind: 'spawn-timeout', message: 'x' });
    b.recordFailure(backoffKey('ev', ''), T0);
    expect(b.snapshot()).toEqual([
      {
        key: KEY,
        scalerName: 'bm',
        labelSetKey: 'linux,x64',
        consecutive: 1,
        deferUntilMs: T0 + 30_000,
        lastError: { kind: 'spawn-timeout', message: 'x' },
      },
      { key: 'ev|', scalerName: 'ev', labelSetKey: '', consecutive: 1, deferUntilMs: T0 + 30_000 },
    ]);
  });

  it('validates its options', () => {
    expect(() => new ProvisionBackoff({ baseMs: 60_000, maxMs: 30_000 })).toThrow(/must be >= base/);
    expect(() => new ProvisionBackoff({ baseMs: 0 })).toThrow(RangeError);
    expect(() => new ProvisionBackoff({ maxConsecutiveFailures: 0 })).toThrow(RangeError);
    expect(new ProvisionBackoff({ baseMs: 1_000, maxMs: 1_000 }).delayFor(10)).toBe(1_000);
  });

  it('forgets a removed scaler', () => {
    const b = new ProvisionBackoff();
    b.recordFailure(KEY, T0, 'a');
    b.recordFailure(backoffKey('other', 'x'), T0);
    b.forgetScaler('bm');
    expect(b.snapshot().map((s) => s.scalerName)).toEqual(['other']);
    expect(b.recordFailure(KEY, T0, 'a').counted).toBe(true);
  });

  it('property: delay is monotone in consecutive failures and never exceeds max', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 100_000 }),
        fc.integer({ min: 0, max: 10_000_000 }),
        fc.integer({ min: 1, max: 80 }),
        (baseMs, extra, failures) => {
          const b = new ProvisionBackoff({ baseMs, maxMs: baseMs + extra });
          let prev = 0;
          for (let i = 0; i < failures; i++) {
            const s = b.recordFailure('k', T0);
            expect(s.delayMs).toBeGreaterThanOrEqual(prev);
            expect(s.delayMs).toBeLessThanOrEqual(baseMs + extra);
            expect(s.deferUntilMs).toBe(T0 + s.delayMs);
            prev = s.delayMs;
          }
        },
      ),
    );
  });
});

describe('ProvisionBackoff lifts', () => {
  it('remembers the last lift of each label set, by whom and the streak it ended; a plain clear leaves none', () => {
    const b = new ProvisionBackoff();
    const other = backoffKey('bm', 'linux,arm');
    b.recordFailure(KEY, T0);
    b.recordFailure(KEY, T0 + 1);
    b.recordFailure(other, T0);
    expect(b.clear('bm', 'linux,x64', { by: 'operator', atMs: T0 + 5 })).toEqual(['linux,x64']);
    expect(b.check(KEY, T0 + 6)).toEqual({ blocked: false });
    expect(b.liftHistory()).toEqual([
      { scalerName: 'bm', labelSetKey: 'linux,x64', by: 'operator', atMs: T0 + 5, consecutive: 2 },
    ]);
    // A reload lifts the rest; a label set that was not backing off gets no row.
    expect(b.clear('bm', undefined, { by: 'reload', atMs: T0 + 9 })).toEqual(['linux,arm']);
    expect(b.liftHistory().map((l) => [l.labelSetKey, l.by])).toEqual([
      ['linux,x64', 'operator'],
      ['linux,arm', 'reload'],
    ]);
    b.recordFailure(KEY, T0 + 10);
    b.clear('bm');
    expect(b.liftHistory()).toHaveLength(2);
    b.forgetScaler('bm');
    expect(b.liftHistory()).toEqual([]);
  });
});

describe('backoffKey', () => {
  it('is scaler|labelSetKey and round-trips names with separators', () => {
    expect(backoffKey('bm', 'a,b')).toBe('bm|a,b');
    fc.assert(
      fc.property(fc.string(), fc.string(), (name, labels) => {
        expect(parseBackoffKey(backoffKey(name, labels))).toEqual({ scalerName: name, labelSetKey: labels });
      }),
    );
  });
});
