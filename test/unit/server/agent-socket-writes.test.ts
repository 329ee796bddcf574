/**
 * What the agent socket hands to the kernel, and when: a registration's answer leaves on its own,
 * before the bound job's claim has committed, so the agent reads it meanwhile; the assignment then
 * follows in a write of its own. Real loopback TCP and WebSocket framing, the real session, store
 * and dispatcher (manager harness); the count is taken where the socket hands data to the kernel.
 */
import { once } from 'node:events';
import { createServer } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { WebSocket, WebSocketServer } from 'ws';
import { handleAgentSocket } from '../../../src/server/agent-socket.js';
import { bareMetal, spawnToken, useManagerHarnesses } from '../../helpers/manager-harness.js';

const hs = useManagerHarnesses();
const closers: (() => void)[] = [];
afterEach(() => {
  for (const c of closers.splice(0)) c();
});

/** A WebSocket pair over loopback; `handoffs` holds the text of each of the server socket's writes. */
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
  const handoffs: string[] = [];
  // One of these per hand-off: _writev for a corked batch, _write for a lone chunk.
  const text = (c: unknown): string =>
    Buffer.isBuffer(c)
      ? c.toString('latin1')
      : typeof c === 'string'
        ? c
        : text((c as { chunk: unknown }).chunk);
  const s = sock as unknown as Record<'_write' | '_writev', (...a: unknown[]) => unknown>;
  const write = s._write.bind(sock);
  s._write = (chunk: unknown, ...rest: unknown[]) => (handoffs.push(text(chunk)), write(chunk, ...rest));
  const writev = s._writev.bind(sock);
  s._writev = (chunks: unknown, ...rest: unknown[]) => (
    handoffs.push((chunks as unknown[]).map(text).join('')),
    writev(chunks, ...rest)
  );
  closers.push(() => {
    client.terminate();
    server.terminate();
    http.close();
  });
  return { server, sock, client, handoffs };
}

describe('the agent socket', () => {
  it("hands a registration's answer to the kernel before the bound job's assignment, in its own write", async () => {
    const h = await hs.make({ config: { version: 1, scalers: [bareMetal('alpha', [['linux']])] } });
    const b = h.backend('alpha');
    await h.submit({ a: { runsOn: ['linux'] } });
    const [id] = b.pendingIds();
    b.resolveSpawn(id!);
    await h.settle();
    const { server, sock, client, handoffs } = await pair();
    handleAgentSocket(
      server,
      {
        store: h.store,
        dispatcher: h.dispatcher!,
        clock: h.clock,
        logger: pino({ level: 'silent' }),
        heartbeatIntervalMs: 10_000,
        isStopping: () => false,
      },
      'test',
      sock,
    );
    const types: string[] = [];
    const assigned = new Promise<void>((resolve) =>
      client.on('message', (d) => {
        const type = (JSON.parse(String(d)) as { type: string }).type;
        types.push(type);
        if (type === 'job.assign') resolve();
      }),
    );
    client.send(
      JSON.stringify({
        type: 'register',
        protocol: 1,
        agentId: id,
        token: spawnToken(b.requestFor(id!)!),
        labels: ['linux', 'kici:scaler:alpha'],
      }),
    );
    await assigned;
    expect(types).toEqual(['register.ack', 'job.assign']);
    const ack = handoffs.findIndex((w) => w.includes('"register.ack"'));
    const assign = handoffs.findIndex((w) => w.includes('"job.assign"'));
    expect(ack).toBeGreaterThanOrEqual(0);
    expect(assign).toBeGreaterThan(ack);
  });
});
