import type { ConnectedAgent } from '../dispatch/agent-registry.js';
import { CloseCodes } from '../protocol/messages.js';
import { monoNow, type Clock } from '../util/clock.js';

/** Beats an agent may miss before its connection is closed. */
export const MISSED_BEATS = 3;

/**
 * Close every agent silent for more than MISSED_BEATS intervals. Silence is measured on the
 * monotonic clock: a wall-clock step (NTP, `date -s`, a VM resumed) must not close every agent
 * at once, nor keep a dead one open. Returns the ids it closed.
 */
export function closeSilentAgents(
  agents: Iterable<ConnectedAgent>,
  clock: Clock,
  intervalMs: number,
): string[] {
  const now = monoNow(clock);
  const closed: string[] = [];
  for (const a of agents) {
    if (now - a.lastSeenMono <= intervalMs * MISSED_BEATS) continue;
    a.closedFor = 'heartbeat-timeout';
    a.close(CloseCodes.heartbeatTimeout, 'heartbeat timeout');
    closed.push(a.id);
  }
  return closed;
}

/** How long the agent has been connected, never negative, whatever the wall clock did. */
export function uptimeMs(a: ConnectedAgent, clock: Clock): number {
  return Math.max(0, monoNow(clock) - a.connectedMono);
}
