import type { IncomingMessage, Server } from 'node:http';
import type { Duplex } from 'node:stream';
import { WebSocketServer, type WebSocket } from 'ws';
import { LIMITS } from '../protocol/limits.js';
import { errorMessage } from '../util/errors.js';
import type { Logger } from '../util/logger.js';
import { closeWithin } from './ws-close.js';

/**
 * Called for every accepted connection; `registered()` lifts the limits on unregistered peers.
 * `socket` is the connection under the WebSocket (for holding writes back, see coalesceWrites).
 */
export type OnAgentConnection = (
  ws: WebSocket,
  remote: string,
  registered: () => void,
  socket: Duplex,
) => void;

/** Limits on connections that have not registered; LIMITS by default, smaller in tests. */
export interface PendingLimits {
  maxPending: number;
  maxPerAddress: number;
}

/**
 * The `/ws` endpoint on the HTTP server. It owns everything a stranger can reach before a token is
 * checked, so nothing here may throw: every socket gets an 'error' listener, a connection that has
 * not registered may send only LIMITS.preAuthBytes, one address may hold only a few such connections,
 * and when all the slots are taken a new connection displaces the oldest one that has sent nothing.
 * Idle strangers therefore cannot keep a real agent from registering.
 */
export function attachAgentEndpoint(
  server: Server,
  logger: Logger,
  onConnection: OnAgentConnection,
  limits?: PendingLimits,
): WebSocketServer {
  const endpoint = createAgentEndpoint(logger, onConnection, limits);
  endpoint.attach(server);
  return endpoint.wss;
}

/** One agent endpoint that several listeners can share: the limits on strangers count across all. */
export interface AgentEndpoint {
  readonly wss: WebSocketServer;
  /** Serve `/ws` on `server` too. */
  attach(server: Server): void;
}

export function createAgentEndpoint(
  logger: Logger,
  onConnection: OnAgentConnection,
  limits: PendingLimits = {
    maxPending: LIMITS.maxPendingConnections,
    maxPerAddress: LIMITS.maxPendingPerAddress,
  },
): AgentEndpoint {
  const log = logger.child({ component: 'agent-endpoint' });
  // ws enforces maxPayload itself: a larger frame closes the connection with 1009.
  const wss = new WebSocketServer({ noServer: true, maxPayload: LIMITS.maxPayloadBytes });
  wss.on('error', (err) => log.error({ err: errorMessage(err) }, 'websocket server error'));
  const pending = new PendingBook(limits);
  let warnedFull = false;

  const onUpgrade = (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    const remote = req.socket.remoteAddress ?? 'unknown';
    // A peer that resets the connection mid-handshake must not become an uncaught exception.
    socket.on('error', (err) => log.debug({ remote, err: errorMessage(err) }, 'agent socket error'));
    if (pathOf(req.url) !== '/ws') return refuse(socket, 404, 'Not Found');
    const room = pending.admit(remote);
    if (room === 'address-full') {
      log.debug({ remote }, 'too many unregistered agent connections from one address; refusing one');
      return refuse(socket, 503, 'Service Unavailable');
    }
    if (room === 'full') {
      if (!warnedFull) log.warn({ remote }, 'every unregistered agent connection is busy; refusing one');
      warnedFull = true;
      return refuse(socket, 503, 'Service Unavailable');
    }
    warnedFull = false;
    wss.handleUpgrade(req, socket, head, (ws) => {
      let seen = 0;
      // Displaced to make room for a newer connection: it never sent a byte.
      const entry = pending.add(remote, () => {
        stopCounting();
        log.debug({ remote }, 'idle unregistered connection displaced by a newer one');
        closeWithin(ws, 1013, 'idle before registration; displaced');
      });
      let counting = true;
      const stopCounting = () => {
        if (!counting) return;
        counting = false;
        pending.remove(entry);
        socket.off('data', count);
      };
      // A second 'data' listener only observes: ws still receives every byte.
      const count = (chunk: Buffer) => {
        seen += chunk.length;
        entry.spoke = true;
        if (seen <= LIMITS.preAuthBytes) return;
        stopCounting();
        log.warn({ remote, bytes: seen }, 'unregistered connection sent too much; closing it');
        // Nothing more is read: ws's own listener goes too (its receiver would buffer the rest of a
        // large frame), and ws resuming the socket when its receiver drains is undone at once.
        socket.removeAllListeners('data');
        socket.pause();
        socket.on('resume', () => socket.pause());
        closeWithin(ws, 1009, `more than ${LIMITS.preAuthBytes} bytes before registration`);
      };
      socket.on('data', count);
      ws.on('close', stopCounting);
      // ws reports protocol violations (bad UTF-8, unmasked or oversized frames, reserved opcodes)
      // as 'error' and closes with 1007/1002/1009 itself; without a listener they would crash us.
      // The connection handler logs them with the agent's id.
      ws.on('error', (err) => log.debug({ remote, err: err.message }, 'agent connection error'));
      try {
        onConnection(ws, remote, stopCounting, socket);
      } catch (err) {
        log.error({ remote, err: errorMessage(err) }, 'could not set up an agent connection');
        ws.terminate();
      }
    });
  };
  return { wss, attach: (server) => void server.on('upgrade', onUpgrade) };
}

interface PendingEntry {
  remote: string;
  /** It has sent at least one byte: it is not displaced. */
  spoke: boolean;
  displace(): void;
}

/** The unregistered connections, oldest first, and how many each address holds. */
class PendingBook {
  private readonly entries = new Set<PendingEntry>();
  private readonly perAddress = new Map<string, number>();

  constructor(private readonly limits: PendingLimits) {}

  /** Whether a new connection from `remote` may be accepted; at the limit, an idle one makes room. */
  admit(remote: string): 'ok' | 'address-full' | 'full' {
    if ((this.perAddress.get(remote) ?? 0) >= this.limits.maxPerAddress) return 'address-full';
    if (this.entries.size < this.limits.maxPending) return 'ok';
    for (const e of this.entries) {
      if (e.spoke) continue;
      this.remove(e);
      e.displace();
      return 'ok';
    }
    return 'full';
  }

  add(remote: string, displace: () => void): PendingEntry {
    const e: PendingEntry = { remote, spoke: false, displace };
    this.entries.add(e);
    this.perAddress.set(remote, (this.perAddress.get(remote) ?? 0) + 1);
    return e;
  }

  remove(e: PendingEntry): void {
    if (!this.entries.delete(e)) return;
    const n = (this.perAddress.get(e.remote) ?? 1) - 1;
    if (n > 0) this.perAddress.set(e.remote, n);
    else this.perAddress.delete(e.remote);
  }
}

function pathOf(url: string | undefined): string | undefined {
  try {
    return new URL(url ?? '/', 'http://x').pathname;
  } catch {
    return undefined;
  }
}

/** Answer an upgrade we will not accept with a plain HTTP status, then drop the socket. */
function refuse(socket: Duplex, status: number, text: string): void {
  if (!socket.writable) return void socket.destroy();
  socket.once('finish', () => socket.destroy());
  socket.end(`HTTP/1.1 ${status} ${text}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n`);
}

/**
 * Malformed HTTP from a client ('clientError'): answer like Node's default, and never let the
 * socket's own error escape.
 */
export function answerClientErrors(server: Server, logger: Logger): void {
  server.on('clientError', (err: Error & { code?: string }, socket: Duplex) => {
    logger.debug({ code: err.code, err: err.message }, 'malformed HTTP request');
    // A malformed client's socket may error while we answer it; there is nothing more to do with it.
    socket.on('error', () => {});
    if (!socket.writable) return void socket.destroy();
    const status =
      err.code === 'HPE_HEADER_OVERFLOW' ? '431 Request Header Fields Too Large' : '400 Bad Request';
    socket.end(`HTTP/1.1 ${status}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n`);
    socket.destroy();
  });
}
