import type { WebSocket } from 'ws';
import { AgentSession, NOT_JSON, type AgentSessionDeps } from './agent-session.js';
import { coalesceWrites, type Corkable } from '../util/coalesce-writes.js';
import { closeWithin } from './ws-close.js';

export type AgentSocketDeps = AgentSessionDeps;

/**
 * Adapts one WebSocket to an AgentSession: frames in, messages and closes out. Given the socket
 * under it, the frames of one turn of the event loop leave in one write.
 */
export function handleAgentSocket(
  ws: WebSocket,
  deps: AgentSocketDeps,
  remote: string,
  socket?: Corkable,
): AgentSession {
  const hold = socket ? coalesceWrites(socket) : undefined;
  const session = new AgentSession(
    deps,
    {
      send: (msg) => {
        if (ws.readyState !== ws.OPEN) return;
        hold?.();
        ws.send(JSON.stringify(msg));
        // The agent waits on these: they leave now, with whatever this turn wrote before them. A
        // registration's answer does not wait for the bound job's claim to commit, so the agent
        // reads it meanwhile instead of after, and then finds its assignment waiting.
        if (msg.type === 'job.assign' || msg.type === 'register.ack') hold?.flush();
      },
      close: (code, reason, refused) => (refused ? closeWithin(ws, code, reason) : ws.close(code, reason)),
      isOpen: () => ws.readyState === ws.OPEN,
    },
    remote,
  );
  // ws has already closed the connection with 1002/1007/1009 when it reports an error.
  ws.on('error', (err: Error & { code?: string }) => session.protocolError(err));
  ws.on('message', (data, isBinary) => {
    let raw: unknown = NOT_JSON;
    if (!isBinary) {
      try {
        raw = JSON.parse(String(data));
      } catch {
        // stays NOT_JSON: the session refuses it with 4400
      }
    }
    void session.receive(raw);
  });
  ws.on('close', () => void session.closed());
  return session;
}
