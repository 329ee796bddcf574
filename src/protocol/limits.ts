/**
 * Size limits of the agent protocol, shared by the orchestrator and the agent. Plain numbers, so the
 * agent can import them without cost. Documented in docs/protocol.md ("Limits").
 */
export const LIMITS = {
  /** Largest frame the orchestrator accepts from a registered agent; a larger one closes with 1009. */
  maxPayloadBytes: 4 * 1024 * 1024,
  /** What an agent keeps each serialized frame under, leaving room below maxPayloadBytes. */
  agentFrameBytes: 1024 * 1024,
  /**
   * Raw bytes a connection may send before its registration succeeds. Anything more closes it with
   * 1009: a stranger cannot make the orchestrator buffer large frames.
   */
  preAuthBytes: 16 * 1024,
  /**
   * Connections that have not registered yet. At the limit, a new one takes the place of the oldest
   * that has sent nothing at all; only when every one of them is talking is it refused (HTTP 503).
   */
  maxPendingConnections: 1024,
  /** Unregistered connections from one remote address; more are refused with HTTP 503. */
  maxPendingPerAddress: 32,
  /** Time a connection has to send a valid `register` (a stranger holds a slot no longer). */
  registerTimeoutMs: 5_000,

  // Field limits. A register frame that meets them, in ASCII, stays far below preAuthBytes.
  idChars: 100,
  tokenChars: 200,
  labelChars: 300,
  registerLabels: 64,
  registerLabelChars: 8 * 1024,
  maxStepIdx: 100_000,
  logLineChars: 1_000_000,
  logLinesPerMessage: 5000,
} as const;
