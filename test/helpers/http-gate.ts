/**
 * A gate a step can wait on from inside a guest or a container, where a host file cannot be seen:
 * an HTTP server on every address that answers 503 until the test opens it, then 200.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface HttpGate {
  port: number;
  /** The step's shell loop for a gate at `host` (busybox wget fails on the 503 of a shut gate). */
  wait(host: string): string;
  open(): void;
  close(): Promise<void>;
}

export async function httpGate(): Promise<HttpGate> {
  let open = false;
  const server = createServer((_req, res) => {
    res.writeHead(open ? 200 : 503).end();
  });
  await new Promise<void>((r) => server.listen(0, '0.0.0.0', r));
  const port = (server.address() as AddressInfo).port;
  return {
    port,
    wait: (host) => `until wget -q -O /dev/null http://${host}:${port}/; do sleep 0.2; done`,
    open: () => void (open = true),
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}
