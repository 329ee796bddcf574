import { CloseCodes } from '../protocol/messages.js';

/**
 * The agent session's states and transitions, as data, so the WebSocket handler, the test harness
 * and the unit tests all read the same table.
 *
 *   hello ─claim→ claiming ─claim.ok→ claimed ─register→ registering ─register.ok→ registered
 *   hello ─register→ registering;  registered ⇄ busy (job.assigned / job.finished)
 *   registered|busy ─draining→ leaving;  any ─refuse|close→ closed
 */
export type SessionState =
  'hello' | 'claiming' | 'claimed' | 'registering' | 'registered' | 'busy' | 'leaving' | 'closed';

export type SessionEvent =
  | 'claim'
  | 'claim.ok'
  | 'register'
  | 'register.ok'
  | 'job.assigned'
  | 'job.finished'
  | 'draining'
  | 'refuse'
  | 'close';

const TABLE: Record<SessionState, Partial<Record<SessionEvent, SessionState>>> = {
  hello: { claim: 'claiming', register: 'registering' },
  claiming: { 'claim.ok': 'claimed' },
  claimed: { register: 'registering' },
  registering: { 'register.ok': 'registered' },
  registered: { 'job.assigned': 'busy', draining: 'leaving', 'job.finished': 'registered' },
  busy: { 'job.finished': 'registered', 'job.assigned': 'busy', draining: 'leaving' },
  leaving: { 'job.assigned': 'leaving', 'job.finished': 'leaving', draining: 'leaving' },
  closed: {},
};

/** The next state, or undefined when the event is not allowed here. `refuse` and `close` always end it. */
export function nextState(state: SessionState, event: SessionEvent): SessionState | undefined {
  if (event === 'refuse' || event === 'close') return 'closed';
  return TABLE[state][event];
}

/** Why an agent was turned away; each maps to exactly one close code (docs/protocol.md, Refusals). */
export type RefusalKind =
  | 'malformed'
  | 'register-timeout'
  | 'unexpected-message'
  | 'bad-token'
  | 'claim-refused'
  | 'no-claim-store'
  | 'labels-out-of-scope'
  | 'unknown-scaler-id'
  | 'no-scaler'
  | 'session-unproven'
  | 'replaced'
  | 'shutting-down'
  | 'store-unavailable';

export const REFUSAL_CODES: Record<RefusalKind, number> = {
  malformed: CloseCodes.badMessage,
  'register-timeout': CloseCodes.badMessage,
  'unexpected-message': CloseCodes.badMessage,
  'bad-token': CloseCodes.unauthorized,
  'claim-refused': CloseCodes.unauthorized,
  'no-claim-store': CloseCodes.unauthorized,
  'labels-out-of-scope': CloseCodes.forbidden,
  'unknown-scaler-id': CloseCodes.forbidden,
  'no-scaler': CloseCodes.forbidden,
  'session-unproven': CloseCodes.sessionUnproven,
  replaced: CloseCodes.duplicate,
  'shutting-down': CloseCodes.shuttingDown,
  'store-unavailable': CloseCodes.internal,
};

/** Refusals the agent is told about with `register.rejected` before the close (the 4xxx ones). */
export function announcesRefusal(kind: RefusalKind): boolean {
  return REFUSAL_CODES[kind] >= 4000 && kind !== 'replaced';
}
