/**
 * A WebSocket pair over real loopback TCP, for tests of what a socket hands to the kernel: each of
 * the server socket's hand-offs is recorded as text (Node calls `_write` for a lone chunk and
 * `_writev` for a corked batch), and what the client receives is kept in order.
 */
import { once } from 'node:events';
import { createServer } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { WebSocket, WebSocketServer } from 'ws';

export interface LoopbackPair {
  server: WebSocket;
  client: WebSocket;
  /** The TCP socket under the server's WebSocket. */
  sock: Socket;
  /** The text of each hand-off of the server socket to the kernel, in order. */
  handoffs: string[];
  /** Every message the client received, as text, in order. */
  received: string[];
  /** Resolves once the client has received `n` messages in all. */
  arrived(n: number): Promise<void>;
  close(): void;
}

const text = (c: unknown): string =>
  Buffer.isBuffer(c)
    ? c.toString('latin1')
    : typeof c === 'string'
      ? c
      : text((c as { chunk: unknown }).chunk);

export async function loopbackPair(): Promise<LoopbackPair> {
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
  const handoffs: string[] = [];
  const s = sock as unknown as Record<'_write' | '_writev', (...a: unknown[]) => unknown>;
  const write = s._write.bind(sock);
  s._write = (chunk: unknown, ...rest: unknown[]) => (handoffs.push(text(chunk)), write(chunk, ...rest));
  const writev = s._writev.bind(sock);
  s._writev = (chunks: unknown, ...rest: unknown[]) => (
    handoffs.push((chunks as unknown[]).map(text).join('')),
    writev(chunks, ...rest)
  );
  const received: string[] = [];
  const waiting: { n: number; done: () => void }[] = [];
  client.on('message', (d) => {
    received.push(String(d));
    for (const w of waiting.filter((x) => received.length >= x.n)) {
      waiting.splice(waiting.indexOf(w), 1);
      w.done();
    }
  });
  return {
    server,
    client,
    sock,
    handoffs,
    received,
    arrived: (n) =>
      received.length >= n ? Promise.resolve() : new Promise((done) => waiting.push({ n, done })),
    close: () => {
      client.terminate();
      server.terminate();
      http.close();
    },
  };
}
