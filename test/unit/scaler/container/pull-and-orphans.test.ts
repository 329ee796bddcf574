/** Pull policies and the orphan filter, as pure decisions. */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { isOrphan } from '../../../../src/scaler/backends/container/orphans.js';
import { pullDecision } from '../../../../src/scaler/backends/container/pull.js';

describe('pullDecision', () => {
  it('IfNotPresent pulls only when absent, Always always pulls, Never refuses when absent', () => {
    expect(pullDecision('IfNotPresent', true)).toBe('use');
    expect(pullDecision('IfNotPresent', false)).toBe('pull');
    expect(pullDecision('Always', true)).toBe('pull');
    expect(pullDecision('Always', false)).toBe('pull');
    expect(pullDecision('Never', true)).toBe('use');
    expect(pullDecision('Never', false)).toBe('refuse');
  });
});

const STATES = ['running', 'created', 'restarting', 'paused', 'exited', 'dead', 'removing'] as const;

describe('isOrphan', () => {
  it('never takes a tracked agent, a running one without an id, or a running registered one; takes one only created', () => {
    fc.assert(
      fc.property(
        fc.option(fc.constantFrom('a1', 'a2', 'a3'), { nil: undefined }),
        fc.constantFrom(...STATES),
        fc.subarray(['a1', 'a2', 'a3']),
        fc.subarray(['a1', 'a2', 'a3']),
        (agentId, State, tracked, registered) => {
          const Labels: Record<string, string> = agentId ? { 'kici-agent-id': agentId } : {};
          const c = { State, Labels };
          const orphan = isOrphan(c, {
            tracked: new Set(tracked),
            isRegistered: (id) => registered.includes(id),
          });
          // Only created: nothing runs in it, so it is a leftover like an exited one.
          const up = ['running', 'restarting', 'paused'].includes(State);
          if (agentId && tracked.includes(agentId)) expect(orphan).toBe(false);
          else if (!up) expect(orphan).toBe(true);
          else if (!agentId) expect(orphan).toBe(false);
          else expect(orphan).toBe(!registered.includes(agentId));
        },
      ),
    );
  });
});
