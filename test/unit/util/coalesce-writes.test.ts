/**
 * Frames written in one turn of the event loop leave as one socket write (hot path: a result's ack
 * and the next job's assignment share a write). Real loopback TCP and real WebSocket framing; the
 * count is taken where the socket hands data to the operating system.
 */
import { once } from 'node:events';
import { createServer } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { WebSocket, WebSocketServer } from 'ws';
import { coalesceWrites } from '../../../src/util/coalesce-writes.js';

const closers: (() => void)[] = [];
afterEach(() => {
  for (const c of closers.splice(0)) c();
});

/** A WebSocket pair over loopback; `writes` counts the server socket's hand-offs to the kernel. */
async function pair() {
  const http = createServer();
  const wss = new WebSocketServer({ noServer: true });
  let serverSocket: Socket | undefined;
  http.on('upgrade', (req, socket, head) => {
    serverSocket = socket as Socket;
    wss.handleUpgrade(req, socket, head, (ws) => wss.emit('connection', ws));
  });
  http.listen(0, '127.0.0.1');
  await once(http, 'listening');
  const accepted = once(wss, 'connection') as Promise<[WebSocket]>;
  const client = new WebSocket(`ws://127.0.0.1:${(http.address() as AddressInfo).port}`);
  await once(client, 'open');
  const [server] = await accepted;
  const sock = serverSocket!;
  const counts = { writes: 0 };
  // Node calls one of these per hand-off: _writev for a corked batch, _write for a lone chunk.
  const s = sock as unknown as Record<'_write' | '_writev', (...a: unknown[]) => unknown>;
  for (const k of ['_write', '_writev'] as const) {
    const orig = s[k].bind(sock);
    s[k] = (...a: unknown[]) => (counts.writes++, orig(...a));
  }
  const received: string[] = [];
  client.on('message', (d) => received.push(String(d)));
  closers.push(() => {
    client.terminate();
    server.terminate();
    http.close();
  });
  return { server, sock, counts, received };
}

describe('coalesceWrites', () => {
  it('three frames sent in one turn leave in one write and arrive whole, in order', async () => {
    const { server, sock, counts, received } = await pair();
    const hold = coalesceWrites(sock);
    for (const m of ['ack', 'assign', 'note']) {
      hold();
      server.send(m);
    }
    await new Promise((r) => setImmediate(r));
    const deadline = Date.now() + 5_000;
    while (received.length < 3 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
    expect(received).toEqual(['ack', 'assign', 'note']);
    expect(counts.writes).toBe(1);
  });

  it('without it each frame is its own write; a later turn opens a new write', async () => {
    const { server, sock, counts, received } = await pair();
    for (const m of ['a', 'b', 'c']) server.send(m);
    expect(counts.writes).toBe(3);
    const hold = coalesceWrites(sock);
    hold();
    server.send('d');
    await new Promise((r) => setImmediate(r));
    hold();
    server.send('e');
    await new Promise((r) => setImmediate(r));
    const deadline = Date.now() + 5_000;
    while (received.length < 5 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
    expect(received).toEqual(['a', 'b', 'c', 'd', 'e']);
    // 'd' and 'e' were held in different turns: one write each, never merged across turns.
    expect(counts.writes).toBe(5);
  });

  it('flush() lets the held frames go at once, in one write, without waiting for the turn to end', async () => {
    const { server, sock, counts, received } = await pair();
    const hold = coalesceWrites(sock);
    for (const m of ['ack', 'assign']) {
      hold();
      server.send(m);
    }
    expect(counts.writes).toBe(0);
    hold.flush();
    // Handed to the kernel before this turn ends: no immediate has run yet.
    expect(counts.writes).toBe(1);
    hold();
    server.send('note');
    expect(counts.writes).toBe(1);
    await new Promise((r) => setImmediate(r));
    const deadline = Date.now() + 5_000;
    while (received.length < 3 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
    expect(received).toEqual(['ack', 'assign', 'note']);
    expect(counts.writes).toBe(2);
  });
});
