/**
 * Strangers holding unregistered /ws connections must not keep real agents out: one address holds
 * only a few, the oldest idle one makes room for a newcomer when every slot is taken, and each is
 * closed a few seconds after it opened if it has not registered.
 */
import { randomBytes } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import { connect, type AddressInfo, type Socket } from 'node:net';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { LIMITS } from '../../../src/protocol/limits.js';
import { attachAgentEndpoint } from '../../../src/server/agent-endpoint.js';
import { busyBackoffMs } from '../../../src/agent/agent.js';
import {
  AGENT_BIN,
  alive,
  eventually,
  runNode,
  startTestOrchestrator,
  type TestOrchestrator,
} from '../../helpers/orchestrator.js';

let t: TestOrchestrator | undefined;
const sockets: Socket[] = [];
const children: { pid?: number | undefined; kill(sig?: NodeJS.Signals): boolean }[] = [];
const servers: Server[] = [];
afterEach(async () => {
  for (const s of sockets.splice(0)) s.destroy();
  for (const c of children.splice(0)) if (c.pid && alive(c.pid)) c.kill('SIGKILL');
  for (const s of servers.splice(0)) await new Promise((r) => s.close(r));
  await t?.stop();
  t = undefined;
});

interface Idle {
  socket: Socket;
  status: number;
  /** Resolves when the server ends the connection. */
  closed: Promise<void>;
}

/** Upgrade to /ws from `localAddress`, then send nothing at all. */
function idleConnection(port: number, localAddress: string): Promise<Idle> {
  return new Promise((resolve, reject) => {
    const socket = connect({ port, host: '127.0.0.1', localAddress });
    sockets.push(socket);
    let closedResolve!: () => void;
    const closed = new Promise<void>((r) => (closedResolve = r));
    socket.on('close', () => closedResolve());
    socket.on('error', reject);
    socket.once('data', (d: Buffer) => {
      const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(d.toString('latin1'))?.[1] ?? 0);
      resolve({ socket, status, closed });
    });
    socket.write(
      `GET /ws HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n` +
        `Sec-WebSocket-Key: ${randomBytes(16).toString('base64')}\r\nSec-WebSocket-Version: 13\r\n\r\n`,
    );
  });
}

/** `n` idle connections spread over loopback addresses other than 127.0.0.1, `perAddress` each. */
async function idleFlood(port: number, n: number, perAddress: number): Promise<Idle[]> {
  const out: Idle[] = [];
  for (let i = 0; i < n; i += 50) {
    const batch = [];
    for (let j = i; j < Math.min(n, i + 50); j++) {
      const host = Math.floor(j / perAddress) + 2;
      batch.push(idleConnection(port, `127.0.${Math.floor(host / 250)}.${(host % 250) + 2}`));
    }
    out.push(...(await Promise.all(batch)));
  }
  return out;
}

describe('unregistered connections cannot starve registrations', () => {
  it('with 1,000 idle sockets open, a real agent registers within 2 s; the idle ones are closed after the register window', async () => {
    t = await startTestOrchestrator();
    const port = Number(new URL(t.orch.url).port);
    const tok = await t.api<{ token: string }>('POST', '/api/v1/agents/tokens', {
      agentId: 'starved-agent',
      labels: ['pool-s'],
    });
    const flood = await idleFlood(port, 1000, 25);
    const openedAt = Date.now();
    expect(flood.filter((c) => c.status === 101)).toHaveLength(1000);
    const started = Date.now();
    const agent = runNode([AGENT_BIN], {
      KICI_ORCHESTRATOR_URL: t.orch.wsUrl,
      KICI_AGENT_ID: 'starved-agent',
      KICI_AGENT_TOKEN: tok.body.token,
      KICI_LABELS: 'pool-s',
    });
    children.push(agent.child);
    await eventually(() => t!.orch.dispatcher.registry.get('starved-agent'), 2_000, 'the agent to register');
    const tookMs = Date.now() - started;
    // Every idle socket was still held while the agent got in.
    expect(flood.every((c) => !c.socket.destroyed)).toBe(true);
    // The register window: all of them are closed by the server, none sooner than it.
    await Promise.all(flood.map((c) => c.closed));
    expect(Date.now() - openedAt).toBeGreaterThanOrEqual(LIMITS.registerTimeoutMs - 2_000);
    expect(agent.output().stderr).not.toMatch(/503/);
    console.log(`agent registered ${tookMs} ms after its start with 1000 idle sockets open`);
  }, 60_000);

  it('at the limit, a newcomer displaces the oldest idle connection; one address gets 503 past its share', async () => {
    const server = createServer();
    servers.push(server);
    const seen: string[] = [];
    attachAgentEndpoint(server, pino({ level: 'silent' }), (ws) => seen.push(ws.protocol), {
      maxPending: 4,
      maxPerAddress: 2,
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
    const port = (server.address() as AddressInfo).port;
    const first = await idleConnection(port, '127.0.0.2');
    const rest = await Promise.all(
      ['127.0.0.3', '127.0.0.4', '127.0.0.5'].map((a) => idleConnection(port, a)),
    );
    expect([first, ...rest].map((c) => c.status)).toEqual([101, 101, 101, 101]);
    const newcomer = await idleConnection(port, '127.0.0.6');
    expect(newcomer.status).toBe(101);
    await first.closed; // the oldest idle one made room
    expect(rest.every((c) => !c.socket.destroyed)).toBe(true);
    // The next newcomer displaces the next oldest idle one.
    const second = await idleConnection(port, '127.0.0.6');
    expect(second.status).toBe(101);
    await rest[0]!.closed;
    // A connection that has sent something is not displaced: rest[1] speaks, rest[2] makes room.
    rest[1]!.socket.write(Buffer.from([0x81]));
    await new Promise<void>((r) => rest[1]!.socket.write(Buffer.alloc(0), () => r()));
    const fourth = await idleConnection(port, '127.0.0.7');
    expect(fourth.status).toBe(101);
    await rest[2]!.closed;
    expect(rest[1]!.socket.destroyed).toBe(false);
    // One address holds only its share.
    const third = await idleConnection(port, '127.0.0.6');
    expect(third.status).toBe(503);
    expect(seen).toHaveLength(7);
  });

  it('an agent refused with 503 backs off with jitter, growing to a ceiling', () => {
    const low = [1, 2, 3, 4, 5, 6, 7, 8].map((n) => busyBackoffMs(n, () => 0));
    const high = [1, 2, 3, 4, 5, 6, 7, 8].map((n) => busyBackoffMs(n, () => 1));
    expect(low[0]).toBeGreaterThanOrEqual(50);
    for (let i = 1; i < low.length; i++) expect(high[i]).toBeGreaterThanOrEqual(high[i - 1]!);
    expect(high.at(-1)).toBe(5_000);
    expect(low.every((l, i) => l < high[i]!)).toBe(true);
  });
});
