/**
 * The lifecycle of one scaler-managed agent, as one phase and a table of the moves allowed between
 * phases. Pure: no I/O, no clock. What an agent *is* (spawned for a job or for a warm pool,
 * adopted after a restart) is fixed at creation and lives beside the phase, not in it.
 */

export const AGENT_PHASES = [
  /** Caps (and the machine pool) reserved; waiting for the scaler's spawn semaphore. */
  'reserved',
  /** The backend's spawn() is running. */
  'spawning',
  /** spawn() resolved: the agent process exists and has not registered yet. */
  'starting',
  /** Adopted after a restart: compute exists, waiting for the agent to dial back in. */
  'reconnecting',
  /** Registered and idle (a bound agent is about to get its job). */
  'registered',
  /** Took a job. Agents are single-use, so a busy agent is never idle stock again. */
  'busy',
  /** Torn down: forgotten by the manager, compute being destroyed. Terminal. */
  'destroying',
] as const;

export type AgentPhase = (typeof AGENT_PHASES)[number];

/**
 * Allowed moves. `spawning → registered`: a fast agent may dial in before the backend's spawn()
 * call returns. `reconnecting → busy`: an adopted agent that registered before the restart may
 * already hold a job, so it never counts as idle warm stock.
 */
const NEXT: Record<AgentPhase, readonly AgentPhase[]> = {
  reserved: ['spawning', 'destroying'],
  spawning: ['starting', 'registered', 'destroying'],
  starting: ['registered', 'destroying'],
  reconnecting: ['registered', 'busy', 'destroying'],
  registered: ['busy', 'destroying'],
  busy: ['destroying'],
  destroying: [],
};

export function canTransition(from: AgentPhase, to: AgentPhase): boolean {
  return NEXT[from].includes(to);
}

/** Phases an agent can be created in. */
export const INITIAL_PHASES: readonly AgentPhase[] = ['reserved', 'reconnecting'];

/** Not registered yet (and not torn down): counts as a spawn in flight. */
export function isPending(phase: AgentPhase): boolean {
  return phase === 'reserved' || phase === 'spawning' || phase === 'starting' || phase === 'reconnecting';
}

/** Registered at some point and still alive. */
export function hasRegistered(phase: AgentPhase): boolean {
  return phase === 'registered' || phase === 'busy';
}

/** Immutable facts about where an agent came from. */
export interface AgentOrigin {
  /** Spawned by a warm pool, with no job bound. */
  readonly warm: boolean;
  /** Adopted after a restart; `registeredBefore` when its spawn row says it had registered. */
  readonly recovered?: { readonly registeredBefore: boolean } | undefined;
}

export class IllegalTransition extends Error {
  constructor(
    readonly agentId: string,
    readonly from: AgentPhase,
    readonly to: AgentPhase,
  ) {
    super(`agent ${agentId}: illegal lifecycle transition ${from} -> ${to}`);
  }
}

/**
 * Move an agent to `to`. An illegal move is a programming error: `onIllegal` (log and count) is
 * told, then it throws and the phase stays as it was.
 */
export function transition(
  entry: { agentId: string; phase: AgentPhase },
  to: AgentPhase,
  onIllegal?: (err: IllegalTransition) => void,
): void {
  if (!canTransition(entry.phase, to)) {
    const err = new IllegalTransition(entry.agentId, entry.phase, to);
    onIllegal?.(err);
    throw err;
  }
  entry.phase = to;
}
