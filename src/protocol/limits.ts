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
  /** Connections that have not registered yet; more are refused with HTTP 503 until some finish. */
  maxPendingConnections: 256,
  /** Time a connection has to send a valid `register`. */
  registerTimeoutMs: 10_000,

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
