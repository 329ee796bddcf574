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
  graceMs = 0,
): string[] {
  const now = monoNow(clock);
  const closed: string[] = [];
  for (const a of agents) {
    if (now - a.lastSeenMono <= intervalMs * MISSED_BEATS + graceMs) continue;
    a.closing('heartbeat-timeout');
    a.close(CloseCodes.heartbeatTimeout, 'heartbeat timeout');
    closed.push(a.id);
  }
  return closed;
}

/** How long the agent has been connected, never negative, whatever the wall clock did. */
export function uptimeMs(a: ConnectedAgent, clock: Clock): number {
  return Math.max(0, monoNow(clock) - a.connectedMono);
}

/**
 * The periodic silence check, forgiving the time this process itself was stalled. After a stall (a
 * long GC pause, a starved CPU, a frozen disk) the timer runs before the heartbeats that arrived
 * meanwhile are read from their sockets, so every agent would look silent at once. A check that
 * runs late adds its own lateness to the allowance; a process that is always late still closes a
 * dead agent, only later by that lateness.
 */
export class SilenceWatch {
  private lastCheckMono: number;

  constructor(
    private readonly clock: Clock,
    private readonly intervalMs: number,
  ) {
    this.lastCheckMono = monoNow(clock);
  }

  /** Close the agents silent for too long; returns their ids. */
  check(agents: Iterable<ConnectedAgent>): string[] {
    const now = monoNow(this.clock);
    const late = Math.max(0, now - this.lastCheckMono - this.intervalMs);
    this.lastCheckMono = now;
    return closeSilentAgents(agents, this.clock, this.intervalMs, late);
  }
}
