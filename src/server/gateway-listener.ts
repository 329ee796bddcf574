/**
 * Agent-only listeners on the agent networks' gateways. An orchestrator that keeps its API on
 * loopback is still reachable by container and VM agents, which dial the host at their bridge's
 * gateway: a listener on that address serves the agent WebSocket and nothing else, so the API,
 * the metrics and the dashboard stay on loopback.
 */
import type { Server, ServerResponse } from 'node:http';
import { isIP, type Socket } from 'node:net';
import type { Clock, TimerHandle } from '../util/clock.js';
import { errorMessage } from '../util/errors.js';
import type { Logger } from '../util/logger.js';
import { createListener, type TlsFiles } from './tls.js';

/** Loopback hosts: a listener there is out of an agent container's or VM's reach. */
export function isLoopbackHost(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, '').toLowerCase();
  return h === 'localhost' || h === '::1' || (isIP(h) === 4 && h.startsWith('127.'));
}

/** `ws[s]://<address>:<port>/ws`, bracketing an IPv6 address. */
export function gatewayWsUrl(address: string, port: number, tls: boolean): string {
  const host = isIP(address) === 6 ? `[${address}]` : address;
  return `ws${tls ? 's' : ''}://${host}:${port}/ws`;
}

export interface GatewayListenerDeps {
  /** The main listener's port: the gateway listeners use it too. */
  port: number;
  tls: TlsFiles | undefined;
  /** Serve the agent endpoint on `server` (its `upgrade` events). */
  attach(server: Server): void;
  /** Extra set-up of each server (answering malformed requests). */
  prepare?(server: Server): void;
  clock: Clock;
  log: Logger;
}

/** A bridge that is not up yet (Podman makes its bridge with the first container) is tried again. */
const RETRY_FIRST_MS = 250;
const RETRY_MAX_MS = 5_000;

/** Everything but the agent WebSocket is not here. */
const notFound = (_req: unknown, res: ServerResponse) => {
  res.writeHead(404, { 'content-type': 'text/plain', connection: 'close' });
  res.end('not found: this listener serves only the agent endpoint /ws\n');
};

export class GatewayListeners {
  private readonly open = new Map<
    string,
    { server: Server; reload?: () => Promise<void>; sockets: Set<Socket> }
  >();
  private readonly waiting = new Map<string, TimerHandle>();
  /** Being opened right now: a second sync meanwhile must not open it twice. */
  private readonly opening = new Set<string>();
  private wanted = new Set<string>();
  private closed = false;

  constructor(private readonly deps: GatewayListenerDeps) {}

  /** The addresses listened on right now. */
  addresses(): string[] {
    return [...this.open.keys()];
  }

  /** The URL agents behind `address` dial, once a listener is open there. */
  urlFor(address: string): string | undefined {
    return this.open.has(address) ? gatewayWsUrl(address, this.deps.port, !!this.deps.tls) : undefined;
  }

  /** Listen on exactly `addresses`: new ones are opened, ones no longer wanted are closed. */
  async sync(addresses: Iterable<string>): Promise<void> {
    if (this.closed) return;
    this.wanted = new Set(addresses);
    for (const [addr, timer] of this.waiting)
      if (!this.wanted.has(addr)) {
        timer.cancel();
        this.waiting.delete(addr);
      }
    // Agents connected there keep their connections; only new ones are turned away.
    for (const a of [...this.open.keys()]) if (!this.wanted.has(a)) void this.closeOne(a, false);
    await Promise.all([...this.wanted].map((a) => this.openOne(a, RETRY_FIRST_MS)));
  }

  /** A renewed certificate for new connections, as on the main listener. */
  async reloadTls(): Promise<void> {
    for (const l of this.open.values()) await l.reload?.();
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const t of this.waiting.values()) t.cancel();
    this.waiting.clear();
    await Promise.all([...this.open.keys()].map((a) => this.closeOne(a, true)));
  }

  private async openOne(address: string, retryMs: number): Promise<void> {
    if (this.open.has(address) || this.waiting.has(address) || this.opening.has(address) || this.closed)
      return;
    this.opening.add(address);
    try {
      await this.tryOpen(address, retryMs);
    } finally {
      this.opening.delete(address);
    }
  }

  private async tryOpen(address: string, retryMs: number): Promise<void> {
    const made = await createListener(notFound, this.deps.tls);
    this.deps.prepare?.(made.server);
    this.deps.attach(made.server);
    try {
      await new Promise<void>((resolve, reject) => {
        made.server.once('error', reject);
        made.server.listen(this.deps.port, address, () => {
          made.server.off('error', reject);
          resolve();
        });
      });
    } catch (err) {
      made.server.close();
      const code = (err as NodeJS.ErrnoException).code;
      if (code !== 'EADDRNOTAVAIL' || !this.wanted.has(address) || this.closed) {
        this.deps.log.error(
          { address, port: this.deps.port, err: errorMessage(err) },
          'could not open the agent listener on the agent network gateway; agents there cannot connect',
        );
        return;
      }
      if (retryMs === RETRY_FIRST_MS)
        this.deps.log.info(
          { address },
          'the agent network gateway is not on this host yet; its agent listener opens once it is',
        );
      const timer = this.deps.clock.setTimer(retryMs, () => {
        this.waiting.delete(address);
        if (this.wanted.has(address)) void this.openOne(address, Math.min(retryMs * 2, RETRY_MAX_MS));
      });
      this.waiting.set(address, timer);
      return;
    }
    if (this.closed || !this.wanted.has(address)) return void made.server.close();
    made.server.on('error', (err) =>
      this.deps.log.error({ address, err: errorMessage(err) }, 'agent gateway listener error'),
    );
    // Upgraded agent connections are not the HTTP server's to close: they are kept here for stop.
    const sockets = new Set<Socket>();
    made.server.on('connection', (sock: Socket) => {
      sockets.add(sock);
      sock.once('close', () => sockets.delete(sock));
    });
    this.open.set(address, { ...made, sockets });
    this.deps.log.info(
      { url: gatewayWsUrl(address, this.deps.port, !!this.deps.tls) },
      'agent listener open on the agent network gateway (serves /ws only)',
    );
  }

  /** `force`: the orchestrator stops, so connections still open there are cut as well. */
  private async closeOne(address: string, force: boolean): Promise<void> {
    const l = this.open.get(address);
    if (!l) return;
    this.open.delete(address);
    const closed = new Promise<void>((r) => l.server.close(() => r()));
    l.server.closeIdleConnections();
    if (force) for (const sock of l.sockets) sock.destroy();
    await closed;
  }
}
