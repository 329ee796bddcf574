/**
 * The agent-only listener on an agent network's gateway. 127.0.0.2 stands in for a bridge gateway
 * (all of 127/8 is this host): the agent WebSocket is served there, the API, /metrics and the
 * dashboard are not (404), over plain HTTP and over TLS; a gateway no scaler uses is closed; an
 * address that is not on this host yet is waited for, not fatal.
 */
import { execFileSync } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createServer, request as httpRequest, type Server } from 'node:http';
import { request as httpsRequest } from 'node:https';
import type { AddressInfo, Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import WebSocket from 'ws';
import { afterEach, describe, expect, it } from 'vitest';
import { createAgentEndpoint } from '../../src/server/agent-endpoint.js';
import { GatewayListeners, gatewayWsUrl, isLoopbackHost } from '../../src/server/gateway-listener.js';
import type { TlsFiles } from '../../src/server/tls.js';
import { ManualClock, systemClock } from '../../src/util/clock.js';

const GW = '127.0.0.2';
const log = pino({ level: 'silent' });
const cleanup: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const f of cleanup.splice(0).reverse()) await f();
});

/** A loopback "main" listener (the API's) and gateway listeners on its port, sharing one endpoint. */
async function setUp(tls?: TlsFiles, clock = systemClock) {
  const connected: string[] = [];
  const endpoint = createAgentEndpoint(log, (ws, _remote, _registered, socket) => {
    // Which listener took it: the address the agent dialled.
    connected.push((socket as Socket).localAddress ?? '');
    ws.send('hello agent');
  });
  const main: Server = createServer((_req, res) => res.end('api'));
  await new Promise<void>((r) => main.listen(0, '127.0.0.1', () => r()));
  const port = (main.address() as AddressInfo).port;
  const gateways = new GatewayListeners({ port, tls, attach: (s) => endpoint.attach(s), clock, log });
  cleanup.push(async () => {
    await gateways.close();
    endpoint.wss.close();
    await new Promise<void>((r) => main.close(() => r()));
  });
  return { gateways, port, connected };
}

function get(url: string, ca?: Buffer): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = (url.startsWith('https') ? httpsRequest : httpRequest)(url, ca ? { ca } : {}, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.on('error', reject);
    req.end();
  });
}

/** The first message of a WebSocket to `url`, or the HTTP status that refused the upgrade. */
function dial(url: string, ca?: Buffer): Promise<string> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, ca ? { ca } : {});
    ws.once('message', (m) => {
      ws.terminate();
      resolve(String(m));
    });
    ws.once('unexpected-response', (_req, res) => resolve(`HTTP ${res.statusCode}`));
    ws.once('error', reject);
  });
}

describe('agent gateway listener', () => {
  it('serves /ws on the gateway and answers 404 for the API, metrics and dashboard', async () => {
    const { gateways, port, connected } = await setUp();
    await gateways.sync([GW]);
    expect(gateways.addresses()).toEqual([GW]);
    expect(gateways.urlFor(GW)).toBe(`ws://${GW}:${port}/ws`);
    expect(await dial(`ws://${GW}:${port}/ws`)).toBe('hello agent');
    expect(connected).toEqual([GW]);
    for (const path of ['/api/v1/jobs', '/metrics', '/', '/dashboard', '/healthz', '/ws'])
      expect(await get(`http://${GW}:${port}${path}`), path).toBe(404);
    // An upgrade to anything but /ws is refused too.
    expect(await dial(`ws://${GW}:${port}/api/v1/jobs`)).toBe('HTTP 404');
    // The API stays where it was, on loopback only.
    expect(await get(`http://127.0.0.1:${port}/api/v1/jobs`)).toBe(200);
  });

  it('closes a gateway no scaler uses any more, and every one on close', async () => {
    const { gateways, port } = await setUp();
    // Two syncs at once open each address once.
    await Promise.all([gateways.sync([GW, '127.0.0.3']), gateways.sync([GW, '127.0.0.3'])]);
    expect(gateways.addresses().sort()).toEqual([GW, '127.0.0.3']);
    await gateways.sync([GW]);
    expect(gateways.addresses()).toEqual([GW]);
    await expect(get(`http://127.0.0.3:${port}/ws`)).rejects.toThrow(/ECONNREFUSED/);
    const open = new WebSocket(`ws://${GW}:${port}/ws`);
    await new Promise((r) => open.once('message', r));
    const cut = new Promise((r) => open.once('close', r));
    await gateways.close();
    await cut;
    await expect(get(`http://${GW}:${port}/ws`)).rejects.toThrow(/ECONNREFUSED/);
    expect(gateways.addresses()).toEqual([]);
  });

  it('waits for a gateway that is not on this host yet instead of failing', async () => {
    const clock = new ManualClock();
    const { gateways } = await setUp(undefined, clock);
    // TEST-NET-1: never an address of this host, so the bind fails with EADDRNOTAVAIL.
    await gateways.sync(['192.0.2.1']);
    expect(gateways.addresses()).toEqual([]);
    expect(gateways.urlFor('192.0.2.1')).toBeUndefined();
    // No longer wanted: the retry is dropped, and a later tick opens nothing.
    await gateways.sync([]);
    clock.advance(10_000);
    expect(gateways.addresses()).toEqual([]);
  });

  it('follows TLS: wss:// on the gateway, https:// to the API there is 404', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'kici-gw-tls-'));
    cleanup.push(() => rm(dir, { recursive: true, force: true }));
    await writeFile(join(dir, 'ext.cnf'), `subjectAltName=IP:${GW}\n`);
    execFileSync(
      'openssl',
      ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes']
        .concat(['-keyout', 'k.pem', '-out', 'c.pem', '-days', '1', '-subj', `/CN=${GW}`])
        .concat(['-addext', `subjectAltName=IP:${GW}`]),
      { cwd: dir, stdio: 'pipe' },
    );
    const ca = await readFile(join(dir, 'c.pem'));
    const { gateways, port } = await setUp({ certPath: join(dir, 'c.pem'), keyPath: join(dir, 'k.pem') });
    await gateways.sync([GW]);
    expect(gateways.urlFor(GW)).toBe(`wss://${GW}:${port}/ws`);
    expect(await dial(`wss://${GW}:${port}/ws`, ca)).toBe('hello agent');
    expect(await get(`https://${GW}:${port}/api/v1/jobs`, ca)).toBe(404);
    // No plain listener beside the TLS one.
    await expect(get(`http://${GW}:${port}/api/v1/jobs`)).rejects.toThrow();
    await gateways.reloadTls();
  });
});

describe('loopback hosts and gateway URLs', () => {
  it('tells loopback from the rest', () => {
    for (const h of ['127.0.0.1', '127.1.2.3', 'localhost', '::1', '[::1]', 'LOCALHOST'])
      expect(isLoopbackHost(h), h).toBe(true);
    for (const h of ['0.0.0.0', '::', '172.17.0.1', '10.0.0.1', 'example.com', '128.0.0.1'])
      expect(isLoopbackHost(h), h).toBe(false);
  });

  it('brackets IPv6 and picks the scheme', () => {
    expect(gatewayWsUrl('172.30.0.1', 8080, false)).toBe('ws://172.30.0.1:8080/ws');
    expect(gatewayWsUrl('fd00::1', 8443, true)).toBe('wss://[fd00::1]:8443/ws');
  });
});
