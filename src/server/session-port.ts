import type { OrchestratorMessage } from '../protocol/messages.js';

/** The session's view of its transport: a WebSocket in production, an in-memory fake in tests. */
export interface SessionPort {
  send(msg: OrchestratorMessage): void;
  /** Close the connection; a `refused` peer is not waited on for long. */
  close(code: number, reason: string, refused: boolean): void;
  isOpen(): boolean;
}
