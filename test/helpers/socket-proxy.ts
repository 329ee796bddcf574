/**
 * A unix-socket proxy in front of the real engine socket that a test can shut and reopen: the
 * shared engine cannot be stopped, but a scaler pointed at this socket sees exactly an outage.
 */
import { createConnection, createServer, type Server, type Socket } from 'node:net';

export class SocketProxy {
  private server: Server | undefined;
  private readonly open = new Set<Socket>();

  constructor(
    readonly path: string,
    private readonly target: string,
  ) {}

  async start(): Promise<void> {
    const server = createServer((client) => {
      const upstream = createConnection(this.target);
      for (const s of [client, upstream]) {
        this.open.add(s);
        s.on('close', () => this.open.delete(s));
        s.on('error', () => s.destroy());
      }
      client.pipe(upstream).pipe(client);
      client.on('close', () => upstream.destroy());
      upstream.on('close', () => client.destroy());
    });
    await new Promise<void>((ok, fail) => server.once('error', fail).listen(this.path, ok));
    this.server = server;
  }

  /** The outage: no new connections, and every open one (log follows, waits) is cut. */
  async stop(): Promise<void> {
    const s = this.server;
    this.server = undefined;
    for (const c of this.open) c.destroy();
    if (s) await new Promise<void>((ok) => s.close(() => ok()));
  }
}
