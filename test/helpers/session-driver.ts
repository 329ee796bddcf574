/**
 * One AgentSession driven by hand on a manager harness, as the WebSocket handler drives it: the
 * frames it is given, and the messages and closes it answers with.
 */
import type { OrchestratorMessage } from '../../src/protocol/messages.js';
import { AgentSession, type AgentSessionDeps } from '../../src/server/agent-session.js';
import type { ManagerHarness } from './manager-harness.js';
import { bareMetal } from './scaler-config.js';

/** One bare-metal scaler, `alpha`, serving `linux`. */
export const alphaConfig = { version: 1, scalers: [bareMetal('alpha', [['linux']])] };

export interface Driven {
  session: AgentSession;
  sent: OrchestratorMessage[];
  closes: { code: number; reason: string }[];
}

export function drive(h: ManagerHarness, over: Partial<AgentSessionDeps> = {}): Driven {
  const sent: OrchestratorMessage[] = [];
  const closes: { code: number; reason: string }[] = [];
  let open = true;
  const session = new AgentSession(
    h.sessionDeps(over),
    {
      send: (m) => void sent.push(m),
      close: (code, reason) => {
        open = false;
        closes.push({ code, reason });
      },
      isOpen: () => open,
    },
    'test',
  );
  return { session, sent, closes };
}

/** A token for this agent id, minted in the harness's store. */
export async function mint(
  h: ManagerHarness,
  agentId: string,
  labels: string[],
  kind: 'static' | 'ephemeral' = 'static',
) {
  return (await h.store.tokens.mint({ agentId, labels, kind, now: new Date(h.clock.now()) })).token;
}

/** A `register` frame. */
export const register = (agentId: string, token: string, labels: string[]) => ({
  type: 'register',
  protocol: 1,
  agentId,
  token,
  labels,
});

/** Run one frame and return the close and the register.rejected code (if any). */
export async function refusedWith(d: Driven, frame: unknown) {
  await d.session.receive(frame);
  const rejected = d.sent.find((m) => m.type === 'register.rejected');
  return {
    close: d.closes[0]?.code,
    rejected: rejected?.type === 'register.rejected' ? rejected.code : undefined,
    state: d.session.state,
  };
}
