import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  heldAgents,
  renewalPeriodMs,
  renewHeldTokens,
  startTokenRenewal,
} from '../../../src/server/token-renewal.js';
import { ManualClock } from '../../../src/util/clock.js';
import { createLogger } from '../../../src/util/logger.js';
import { swallowedCounts } from '../../../src/util/swallowed-errors.js';

/** Lets the renewal's promise chain run (the store call is awaited inside a timer callback). */
const settle = () => new Promise((r) => setImmediate(r));

describe('renewalPeriodMs', () => {
  it('is a quarter of the lifetime, between 1 s and 1 min, so a missed round leaves most of it', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1_000, max: 90 * 24 * 3_600_000 }), (ttl) => {
        const p = renewalPeriodMs(ttl);
        expect(p).toBeGreaterThanOrEqual(1_000);
        expect(p).toBeLessThanOrEqual(60_000);
        expect(p).toBeLessThanOrEqual(Math.max(1_000, ttl / 4));
      }),
    );
  });
});

describe('startTokenRenewal', () => {
  it("moves the held agents' tokens a lifetime past now each period, from the wall clock", async () => {
    const clock = new ManualClock(1_000_000);
    const calls: { ids: readonly string[]; until: number }[] = [];
    const r = startTokenRenewal({
      clock,
      tokens: {
        prolong: (ids, until) => (calls.push({ ids, until: until.getTime() }), Promise.resolve(ids.length)),
      },
      agentIds: () => ['a', 'a'],
      ttlMs: () => 8_000,
      log: createLogger({ level: 'silent' }),
    });
    clock.advance(1_999);
    expect(calls).toEqual([]);
    clock.advance(1);
    await settle();
    expect(calls).toEqual([{ ids: ['a'], until: 1_002_000 + 8_000 }]);
    // A wall clock stepped forward an hour: the next round moves the end past the new "now".
    clock.jumpWall(3_600_000);
    clock.advance(2_000);
    await settle();
    expect(calls[1]).toEqual({ ids: ['a'], until: 1_004_000 + 3_600_000 + 8_000 });
    r.cancel();
    clock.advance(10_000);
    await settle();
    expect(calls).toHaveLength(2);
  });

  it('runs one round at a time: a slow store is not sent a second update for the same agents', async () => {
    const clock = new ManualClock(0);
    let started = 0;
    let release: () => void = () => undefined;
    const r = startTokenRenewal({
      clock,
      tokens: {
        prolong: () => {
          started++;
          return new Promise<number>((res) => (release = () => res(1)));
        },
      },
      agentIds: () => ['a'],
      ttlMs: () => 4_000,
      log: createLogger({ level: 'silent' }),
    });
    clock.advance(1_000);
    clock.advance(1_000);
    clock.advance(1_000);
    await settle();
    expect(started).toBe(1);
    release();
    await settle();
    clock.advance(1_000);
    await settle();
    expect(started).toBe(2);
    r.cancel();
  });

  it('a failed round is logged and counted, and the next one runs', async () => {
    const clock = new ManualClock(0);
    let n = 0;
    const r = startTokenRenewal({
      clock,
      tokens: { prolong: () => (++n === 1 ? Promise.reject(new Error('store down')) : Promise.resolve(1)) },
      agentIds: () => ['a'],
      ttlMs: () => 4_000,
      log: createLogger({ level: 'silent' }),
    });
    const before = swallowedCounts().get('tokens.prolong') ?? 0;
    clock.advance(1_000);
    await settle();
    expect(swallowedCounts().get('tokens.prolong')).toBe(before + 1);
    clock.advance(1_000);
    await settle();
    expect(n).toBe(2);
    r.cancel();
  });
});

describe('heldAgents', () => {
  it('is the connected agents whose token stands, and the tracked ones registered or expected back', () => {
    const connected = [
      { id: 'a', revoked: false },
      { id: 'b', revoked: true },
      { id: 'c', revoked: false },
    ];
    const tracked = (
      ['spawning', 'starting', 'reconnecting', 'registered', 'busy', 'destroying'] as const
    ).map((phase) => ({ agentId: `t-${phase}`, phase }));
    expect([...heldAgents(connected, tracked)]).toEqual([
      'a',
      'c',
      't-reconnecting',
      't-registered',
      't-busy',
    ]);
  });
});

describe('renewHeldTokens', () => {
  it('moves them a lifetime past now at once; a failing store is logged and counted, not thrown', async () => {
    const clock = new ManualClock(5_000);
    const calls: [readonly string[], number][] = [];
    const log = createLogger({ level: 'silent' });
    await renewHeldTokens({
      clock,
      tokens: { prolong: (ids, until) => (calls.push([ids, until.getTime()]), Promise.resolve(1)) },
      agentIds: ['x', 'x', 'y'],
      ttlMs: 1_000,
      log,
    });
    expect(calls).toEqual([[['x', 'y'], 6_000]]);
    const before = swallowedCounts().get('tokens.prolong') ?? 0;
    await renewHeldTokens({
      clock,
      tokens: { prolong: () => Promise.reject(new Error('store down')) },
      agentIds: ['x'],
      ttlMs: 1_000,
      log,
    });
    expect(swallowedCounts().get('tokens.prolong')).toBe(before + 1);
  });
});
