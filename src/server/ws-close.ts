import type { WebSocket } from 'ws';
import { cleanText } from '../protocol/clean-text.js';

/** A close reason may hold at most 123 bytes of UTF-8; cut longer ones at a character boundary. */
export function closeReason(reason: string): string {
  let out = cleanText(reason.slice(0, 123));
  while (Buffer.byteLength(out) > 123) out = out.slice(0, -1);
  return cleanText(out);
}

/**
 * Send a close frame, and drop the connection if the peer has not answered it within `ms`: a peer
 * we are refusing must not hold its socket (and our limits) for ws's default 30 s.
 */
export function closeWithin(ws: WebSocket, code: number, reason: string, ms = 1_000): void {
  try {
    ws.close(code, closeReason(reason));
  } catch {
    ws.terminate();
    return;
  }
  setTimeout(() => {
    if (ws.readyState !== ws.CLOSED) ws.terminate();
  }, ms).unref();
}
