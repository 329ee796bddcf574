import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { getRequestListener } from '@hono/node-server';
import type { WebSocketServer } from 'ws';
import type { ScalerManager } from '../scaler/manager.js';
import type { Clock } from '../util/clock.js';
import { errorMessage } from '../util/errors.js';
import type { Logger } from '../util/logger.js';
import { answerClientErrors, createAgentEndpoint, type AgentEndpoint } from './agent-endpoint.js';
import { handleAgentSocket, type AgentSocketDeps } from './agent-socket.js';
import { GatewayListeners, isLoopbackHost } from './gateway-listener.js';
import { createHttpApi, type HttpApiDeps } from './http-api.js';
import { createListener, type TlsFiles } from './tls.js';

/** The agent session's dependencies but the one hook the listener fills in itself. */
export type AgentSessionWiring = Omit<AgentSocketDeps, 'onRegistered'> & {
  onRegistered: (agentId: string) => void;
};

/**
 * The orchestrator's listeners: the HTTP(S) server with the API and the agent WebSocket, its TLS
 * reload, and the agent-only listeners on the agent networks' gateways.
 */
export class OrchestratorListeners {
  #url = '';
  #wsUrl = '';
  #server: Server | undefined;
  private wss: WebSocketServer | undefined;
  private endpoint: AgentEndpoint | undefined;
  private gateways: GatewayListeners | undefined;
  private tlsReload: (() => Promise<void>) | undefined;

  constructor(private readonly deps: { tls: TlsFiles | undefined; clock: Clock; log: Logger }) {}

  /** The API's URL; empty until `listen` resolves. */
  get url(): string {
    return this.#url;
  }

  /** The agent WebSocket's URL; empty until `listen` resolves. */
  get wsUrl(): string {
    return this.#wsUrl;
  }

  /** The HTTP(S) server, once listening. */
  get server(): Server | undefined {
    return this.#server;
  }

  /** Serve the API and `/ws` on host:port; the URLs are known once this resolves. */
  async listen(host: string, port: number, api: HttpApiDeps, agents: AgentSessionWiring): Promise<void> {
    const { tls, log } = this.deps;
    const app = createHttpApi(api);
    const listener = getRequestListener(app.fetch);
    // The listener answers its own errors (500), so nothing is left to await here.
    const { server, reload } = await createListener((req, res) => void listener(req, res), tls);
    this.tlsReload = reload;
    answerClientErrors(server, log);
    const endpoint = createAgentEndpoint(log, (ws, remote, onRegistered, socket) =>
      handleAgentSocket(
        ws,
        {
          ...agents,
          onRegistered: (agentId: string) => {
            onRegistered();
            agents.onRegistered(agentId);
          },
        },
        remote,
        socket,
      ),
    );
    endpoint.attach(server);
    this.endpoint = endpoint;
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, host, () => resolve());
    });
    // After start-up an error on the listening socket (EMFILE on accept, say) is logged, never thrown.
    server.on('error', (err) => log.error({ err: errorMessage(err) }, 'http server error'));
    const addr = server.address() as AddressInfo;
    const shownHost = host === '0.0.0.0' || host === '::' ? '127.0.0.1' : host;
    const secure = tls ? 's' : '';
    this.#url = `http${secure}://${shownHost}:${addr.port}`;
    this.#wsUrl = `ws${secure}://${shownHost}:${addr.port}/ws`;
    this.#server = server;
    this.wss = endpoint.wss;
  }

  /** SIGHUP: take a renewed TLS certificate and key for new connections (no-op without TLS). */
  async reloadTls(): Promise<'reloaded' | 'not-configured'> {
    if (!this.tlsReload) return 'not-configured';
    await this.tlsReload();
    await this.gateways?.reloadTls();
    return 'reloaded';
  }

  /** The agent-only listeners on the agent networks' gateways (listening on loopback only). */
  gatewayAddresses(): string[] {
    return this.gateways?.addresses() ?? [];
  }

  /** Where the agents of scaler `name` dial, when they sit behind a gateway listener of ours. */
  gatewayUrlFor(scaler: ScalerManager | undefined, name: string): string | undefined {
    const b = scaler?.backendList().find((x) => x.name === name);
    // Gateways scoped to containers serve only a scaler's job-image containers, not its own agents.
    return b?.agentGateway && b.agentGatewayScope !== 'containers'
      ? this.gateways?.urlFor(b.agentGateway)
      : undefined;
  }

  /**
   * With the API on loopback, open an agent-only listener on each local agent network's gateway
   * (and close those no scaler uses any more). Listening on every address already covers them.
   */
  async syncGateways(host: string, scaler: ScalerManager | undefined): Promise<void> {
    if (!scaler || !this.server || !this.endpoint || !isLoopbackHost(host)) return;
    const wanted = new Set<string>();
    for (const b of scaler.backendList()) if (b.agentGateway) wanted.add(b.agentGateway);
    if (!this.gateways && wanted.size === 0) return;
    const endpoint = this.endpoint;
    this.gateways ??= new GatewayListeners({
      port: (this.server.address() as AddressInfo).port,
      tls: this.deps.tls,
      attach: (server) => endpoint.attach(server),
      prepare: (server) => answerClientErrors(server, this.deps.log),
      clock: this.deps.clock,
      log: this.deps.log,
    });
    await this.gateways.sync(wanted);
  }

  /** The agent WebSocket, then the gateway listeners, then the HTTP server and its connections. */
  async close(): Promise<void> {
    this.wss?.close();
    await this.gateways?.close();
    const server = this.server;
    const closed = new Promise<void>((r) => (server ? server.close(() => r()) : r()));
    // Kept-alive sockets with no request in flight would otherwise hold the close open, and so
    // would one whose request was still being answered now and idles after it (an open dashboard
    // reloads its data at every change): close those as they idle.
    server?.closeIdleConnections();
    const idler = setInterval(() => server?.closeIdleConnections(), 100);
    await closed;
    clearInterval(idler);
    server?.closeAllConnections();
  }
}
