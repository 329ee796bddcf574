/**
 * A start that fails after the orchestrator began to listen stops what it had started, as a stop
 * would: the port is closed again, and the same data dir starts at once. The failure is injected
 * into the last step that can fail (joining the cluster); every part before it is real.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { connect, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { ClusterWiring } from '../../src/server/cluster-wiring.js';
import { bareMetalConfig, startTestOrchestrator } from '../helpers/orchestrator.js';

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as { port: number };
  await new Promise<void>((r) => server.close(() => r()));
  return port;
}

/** Does anything accept a TCP connection on 127.0.0.1:port? */
function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

afterEach(() => {
  vi.restoreAllMocks();
});

describe('a failed start', () => {
  it('closes the listener it opened and lets the data dir go', async () => {
    const dataDir = await mkdtemp(join(tmpdir(), 'kici-failed-start-'));
    const port = await freePort();
    let listeningWhenItFailed: boolean | undefined;
    vi.spyOn(ClusterWiring.prototype, 'start').mockImplementationOnce(async () => {
      listeningWhenItFailed = await accepts(port);
      throw new Error('cluster start failed (injected)');
    });
    await expect(startTestOrchestrator({ dataDir, port, config: bareMetalConfig() })).rejects.toThrow(
      'cluster start failed (injected)',
    );
    expect(listeningWhenItFailed).toBe(true);
    expect(await accepts(port)).toBe(false);

    const again = await startTestOrchestrator({ dataDir, port, config: bareMetalConfig() });
    expect((await again.api<{ status: string }>('GET', '/readyz')).status).toBe(200);
    await again.stop();
    await rm(dataDir, { recursive: true, force: true });
  });
});
