import type { ConnectedAgent } from '../dispatch/agent-registry.js';
import type { ManagedEntry } from '../scaler/agent-book.js';
import type { TokensRepo } from '../store/tokens-repo.js';
import { every, type Clock } from '../util/clock.js';
import type { Logger } from '../util/logger.js';
import { swallow } from '../util/swallowed-errors.js';

/**
 * How often the tokens of held single-use agents are moved out: a quarter of their lifetime,
 * so one missed round still leaves most of it, and at least once a minute, so a wall clock stepped
 * forward (which makes them look expired at once) is caught up with soon. Never more often than
 * once a second.
 */
export function renewalPeriodMs(ttlMs: number): number {
  return Math.min(60_000, Math.max(1_000, Math.floor(ttlMs / 4)));
}

/**
 * A single-use agent's token was minted to last an hour (`agentTokenTtlMs`) from its spawn: long
 * enough to register, but a job may run longer, and an agent that lost its connection after that (a
 * network blip, the orchestrator restarted or upgraded) was refused as expired and its job lost.
 * For as long as this instance holds the agent (connected, or adopted after a restart and expected
 * back), its token is kept a full lifetime ahead; at start, `renewHeldTokens` does one round before
 * agents can dial in. Once the agent is gone the token runs out as before, so a leaked one is good
 * for at most one lifetime.
 */
export function startTokenRenewal(d: {
  clock: Clock;
  tokens: Pick<TokensRepo, 'prolong'>;
  /** The agents this instance holds. */
  agentIds: () => Iterable<string>;
  /** The lifetime a spawned agent's token is minted with (it can change with live settings). */
  ttlMs: () => number;
  log: Logger;
}): { cancel(): void } {
  let running = false;
  const round = async (): Promise<void> => {
    if (running) return; // a slow store: the round in flight already covers these agents
    running = true;
    try {
      await d.tokens.prolong([...new Set(d.agentIds())], new Date(d.clock.now() + d.ttlMs()));
    } finally {
      running = false;
    }
  };
  const timer = every(
    d.clock,
    () => renewalPeriodMs(d.ttlMs()),
    () => void round().catch(swallow(d.log, 'tokens.prolong')),
  );
  return { cancel: () => timer.cancel() };
}

/** Phases of a tracked agent that has registered, or was adopted and is expected back. */
const HELD_PHASES: ReadonlySet<string> = new Set(['reconnecting', 'registered', 'busy']);

/** Agents this instance holds: connected ones (their token not revoked) and the scaler's expected ones. */
export function* heldAgents(
  connected: Iterable<Pick<ConnectedAgent, 'id' | 'revoked'>>,
  tracked: Iterable<Pick<ManagedEntry, 'agentId' | 'phase'>>,
): Iterable<string> {
  for (const a of connected) if (!a.revoked) yield a.id;
  for (const m of tracked) if (HELD_PHASES.has(m.phase)) yield m.agentId;
}

/**
 * One round at start, after recovery and before agents can dial in: an adopted agent whose token
 * ran out while the orchestrator was down (longer than a lifetime) is not refused when it comes back.
 */
export async function renewHeldTokens(d: {
  clock: Clock;
  tokens: Pick<TokensRepo, 'prolong'>;
  agentIds: Iterable<string>;
  ttlMs: number;
  log: Logger;
}): Promise<void> {
  await d.tokens
    .prolong([...new Set(d.agentIds)], new Date(d.clock.now() + d.ttlMs))
    .catch(swallow(d.log, 'tokens.prolong'));
}
