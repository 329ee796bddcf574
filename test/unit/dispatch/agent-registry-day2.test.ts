import { describe, expect, it } from 'vitest';
import { AgentRegistry, newConnectedAgent } from '../../../src/dispatch/agent-registry.js';

/** The registry facts behind `agent drain/resume` and the STATE column. */

function staticAgent(id: string) {
  return newConnectedAgent({
    id,
    labels: ['linux'],
    scaled: null,
    nowMs: 0,
    send: () => undefined,
    close: () => undefined,
  });
}

describe('AgentRegistry: operator drain, self drain and departed agents', () => {
  it('an operator hold makes an idle agent unavailable, and release lifts only that hold', () => {
    const r = new AgentRegistry();
    const a = staticAgent('a');
    r.add(a);
    expect(r.stateOf(a)).toBe('idle');
    r.hold('a');
    expect(r.isAvailable(a)).toBe(false);
    expect(r.idle()).toEqual([]);
    expect(r.stateOf(a)).toBe('draining');
    // The agent drains itself too (SIGTERM): releasing the operator hold does not make it available.
    a.drain();
    expect(r.release('a')).toBe(true);
    expect(r.isAvailable(a)).toBe(false);
    expect(r.stateOf(a)).toBe('draining');
    expect(r.release('a')).toBe(false);
  });

  it('the hold is kept across a reconnect of the same id', () => {
    const r = new AgentRegistry();
    r.add(staticAgent('a'));
    r.hold('a');
    r.remove('a', undefined, 1_000);
    const back = staticAgent('a');
    r.add(back);
    expect(r.isAvailable(back)).toBe(false);
  });

  it('a dropped static agent is departed, with its job, until the grace ends or it returns', () => {
    const r = new AgentRegistry();
    const a = staticAgent('a');
    a.take('j-1');
    r.add(a);
    r.remove('a', a, 1_000);
    expect(r.departedWithin(5_000, 30_000)).toEqual([{ agent: a, goneAtMs: 1_000, jobId: 'j-1' }]);
    expect(r.departedWithin(31_000, 30_000)).toEqual([]);
    r.add(a);
    r.remove('a', a, 40_000);
    r.add(staticAgent('a'));
    expect(r.departedWithin(41_000, 30_000)).toEqual([]);
  });

  it('a revoked agent, and any removal without a time, is not remembered', () => {
    const r = new AgentRegistry();
    const a = staticAgent('a');
    a.revoke();
    r.add(a);
    r.remove('a', a, 1_000);
    const b = staticAgent('b');
    r.add(b);
    r.remove('b', b);
    expect(r.departedWithin(2_000, 30_000)).toEqual([]);
  });
});
