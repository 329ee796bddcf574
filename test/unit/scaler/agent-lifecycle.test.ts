/**
 * The agent lifecycle table: every allowed move is allowed, every other one refused (and the
 * phase kept), and no sequence of requested moves leaves the table's paths.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  AGENT_PHASES,
  INITIAL_PHASES,
  IllegalTransition,
  canTransition,
  hasRegistered,
  isPending,
  transition,
  type AgentPhase,
} from '../../../src/scaler/agent-lifecycle.js';

/** The intended lifecycle, written out independently of the implementation's table. */
const ALLOWED: [AgentPhase, AgentPhase][] = [
  ['reserved', 'spawning'],
  ['reserved', 'destroying'],
  ['spawning', 'starting'],
  ['spawning', 'registered'],
  ['spawning', 'destroying'],
  ['starting', 'registered'],
  ['starting', 'destroying'],
  ['reconnecting', 'registered'],
  ['reconnecting', 'busy'],
  ['reconnecting', 'destroying'],
  ['registered', 'busy'],
  ['registered', 'destroying'],
  ['busy', 'destroying'],
];
const allowed = new Set(ALLOWED.map(([a, b]) => `${a}>${b}`));
const ALL_PAIRS = AGENT_PHASES.flatMap((from) => AGENT_PHASES.map((to) => [from, to] as const));

describe('agent lifecycle table', () => {
  it.each(ALLOWED)('%s -> %s is allowed', (from, to) => {
    expect(canTransition(from, to)).toBe(true);
    const e = { agentId: 'a', phase: from };
    transition(e, to);
    expect(e.phase).toBe(to);
  });

  it.each(ALL_PAIRS.filter(([a, b]) => !allowed.has(`${a}>${b}`)))(
    '%s -> %s is refused, reported once, and the phase kept',
    (from, to) => {
      expect(canTransition(from, to)).toBe(false);
      const e = { agentId: 'a', phase: from };
      const reported: IllegalTransition[] = [];
      expect(() => transition(e, to, (err) => reported.push(err))).toThrow(IllegalTransition);
      expect(e.phase).toBe(from);
      expect(reported).toHaveLength(1);
      expect(reported[0]).toMatchObject({ agentId: 'a', from, to });
    },
  );

  it('every phase is reachable from a start and every path can end in destroying', () => {
    const reach = new Set<AgentPhase>(INITIAL_PHASES);
    for (let grew = true; grew;) {
      grew = false;
      for (const [a, b] of ALL_PAIRS)
        if (reach.has(a) && canTransition(a, b) && !reach.has(b)) grew = reach.add(b) !== undefined;
    }
    expect([...reach].sort()).toEqual([...AGENT_PHASES].sort());
    for (const p of AGENT_PHASES) if (p !== 'destroying') expect(canTransition(p, 'destroying')).toBe(true);
  });

  it('the phase predicates partition the live phases', () => {
    for (const p of AGENT_PHASES) {
      const kinds = [isPending(p), hasRegistered(p), p === 'destroying'].filter(Boolean);
      expect(kinds).toHaveLength(1);
    }
  });
});

/** Order along the lifecycle: a move never goes back (reconnecting sits where starting does). */
const RANK: Record<AgentPhase, number> = {
  reserved: 0,
  spawning: 1,
  starting: 2,
  reconnecting: 2,
  registered: 3,
  busy: 4,
  destroying: 5,
};

describe('random move sequences', () => {
  it('never reach an illegal state: accepted moves follow the table forward, refused ones change nothing', () => {
    fc.assert(
      fc.property(
        fc.constantFrom(...INITIAL_PHASES),
        fc.array(fc.constantFrom(...AGENT_PHASES), { maxLength: 40 }),
        (start, wanted) => {
          const e = { agentId: 'x', phase: start };
          let refused = 0;
          let accepted = 0;
          for (const to of wanted) {
            const before = e.phase;
            try {
              transition(e, to, () => refused++);
              accepted++;
              expect(allowed.has(`${before}>${to}`)).toBe(true);
              expect(RANK[e.phase]).toBeGreaterThan(RANK[before]);
            } catch (err) {
              expect(err).toBeInstanceOf(IllegalTransition);
              expect(e.phase).toBe(before);
            }
            expect(AGENT_PHASES).toContain(e.phase);
            // Once registered, never pending again; once destroying, nothing else.
            if (hasRegistered(before)) expect(isPending(e.phase)).toBe(false);
            if (before === 'destroying') expect(e.phase).toBe('destroying');
          }
          // Each request is either applied or refused and reported, never both, never silently.
          expect(accepted + refused).toBe(wanted.length);
        },
      ),
      { numRuns: 500 },
    );
  });
});
