/**
 * The agent session's states: its transition table, and a session on the real store (PGlite and
 * dispatcher) walking it through a job and a drain.
 */
import { describe, expect, it } from 'vitest';
import {
  nextState,
  REFUSAL_CODES,
  type SessionEvent,
  type SessionState,
} from '../../../src/server/session-table.js';
import { useManagerHarnesses } from '../../helpers/manager-harness.js';
import { alphaConfig as config, drive, mint, register } from '../../helpers/session-driver.js';

const hs = useManagerHarnesses();

describe('session transition table', () => {
  const all: SessionEvent[] = [
    'claim',
    'claim.ok',
    'register',
    'register.ok',
    'job.assigned',
    'job.finished',
    'draining',
  ];
  it('walks hello → claim → register → registered ⇄ busy → leaving', () => {
    const path: [SessionEvent, SessionState][] = [
      ['claim', 'claiming'],
      ['claim.ok', 'claimed'],
      ['register', 'registering'],
      ['register.ok', 'registered'],
      ['job.assigned', 'busy'],
      ['job.finished', 'registered'],
      ['job.assigned', 'busy'],
      ['draining', 'leaving'],
    ];
    let s: SessionState = 'hello';
    for (const [ev, want] of path) {
      s = nextState(s, ev)!;
      expect(s).toBe(want);
    }
  });
  it('allows no claim after a claim, no register before the claim answer, nothing after close', () => {
    expect(nextState('claimed', 'claim')).toBeUndefined();
    expect(nextState('claiming', 'register')).toBeUndefined();
    expect(nextState('registered', 'claim')).toBeUndefined();
    expect(nextState('hello', 'job.assigned')).toBeUndefined();
    for (const ev of all) expect(nextState('closed', ev)).toBeUndefined();
  });
  it('refuse and close end every state', () => {
    for (const s of [
      'hello',
      'claiming',
      'claimed',
      'registering',
      'registered',
      'busy',
      'leaving',
    ] as const) {
      expect(nextState(s, 'refuse')).toBe('closed');
      expect(nextState(s, 'close')).toBe('closed');
    }
  });
  it('keeps the documented close codes', () => {
    expect(REFUSAL_CODES).toEqual({
      malformed: 4400,
      'register-timeout': 4400,
      'unexpected-message': 4400,
      'bad-token': 4401,
      'claim-refused': 4401,
      'no-claim-store': 4401,
      'labels-out-of-scope': 4403,
      'unknown-scaler-id': 4403,
      'no-scaler': 4403,
      'session-unproven': 4412,
      replaced: 4409,
      'shutting-down': 4503,
      'store-unavailable': 1011,
    });
  });
});

describe('session refusals keep their close codes', () => {
  it('a job moves registered → busy, its result back to registered; draining → leaving', async () => {
    const h = await hs.make({ config });
    const tok = await mint(h, 'box-1', ['linux']);
    const d = drive(h);
    await d.session.receive(register('box-1', tok, ['linux']));
    const { ids } = await h.submit({ a: { runsOn: ['linux'] } });
    await h.pump();
    expect(d.session.state).toBe('busy');
    await d.session.receive({ type: 'job.started', jobId: ids[0] });
    await d.session.receive({ type: 'job.finished', jobId: ids[0], result: 'succeeded', exitCode: 0 });
    expect(d.session.state).toBe('registered');
    await d.session.receive({ type: 'agent.draining' });
    expect(d.session.state).toBe('leaving');
    await d.session.closed();
    expect(d.session.state).toBe('closed');
    expect(h.dispatcher!.registry.get('box-1')).toBeUndefined();
  });
});
