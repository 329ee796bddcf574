import { createServer } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { WebSocketServer } from 'ws';
import { AGENT_BIN, alive, eventually, runNode } from '../helpers/orchestrator.js';

/**
 * A scaler-started agent on a firewalled network is refused (TCP reset) until its rules apply, so
 * its first dial must be retried quickly and quietly; a static agent keeps the usual back-off and
 * says why it cannot connect. Real agent processes; a port with no listener gives the same refusal.
 */

let wss: WebSocketServer | undefined;
const children: ReturnType<typeof runNode>[] = [];
afterEach(() => {
  for (const c of children.splice(0)) if (c.child.pid && alive(c.child.pid)) c.child.kill('SIGKILL');
  wss?.close();
  wss = undefined;
});

async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', () => r()));
  const port = (s.address() as { port: number }).port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

/** Start an agent at a port nobody listens on, open the port after `refusedMs`; ms to its first connection. */
async function dialAfterRefusals(scalerManaged: boolean, refusedMs: number) {
  const port = await freePort();
  const agent = runNode([AGENT_BIN], {
    KICI_ORCHESTRATOR_URL: `ws://127.0.0.1:${port}/ws`,
    KICI_AGENT_ID: scalerManaged ? 'scaler-container-dial0001' : 'static-dial',
    KICI_AGENT_TOKEN: 'not-checked-here',
    KICI_LABELS: 'dial',
    KICI_SCALER_MANAGED: scalerManaged ? '1' : '',
  });
  children.push(agent);
  await new Promise((r) => setTimeout(r, refusedMs));
  let connectedAt = 0;
  wss = new WebSocketServer({ host: '127.0.0.1', port });
  wss.on('connection', () => (connectedAt ||= Date.now()));
  await new Promise((r) => wss!.once('listening', r));
  const openedAt = Date.now();
  await eventually(() => connectedAt > 0, 15_000, 'the first connection');
  return { afterOpen: connectedAt - openedAt, stderr: agent.output().stderr };
}

describe('agent first dial', () => {
  it('a scaler-started agent retries a refused first dial within tens of ms, without logging it', async () => {
    const r = await dialAfterRefusals(true, 1_200);
    // The back-off would wait up to 1 s here (250, 500, 1000 ms steps); the first-dial retry is 10 ms.
    expect(r.afterOpen).toBeLessThan(200);
    expect(r.stderr).not.toMatch(/connection error/);
  });

  it('a static agent keeps the back-off and logs why it cannot connect', async () => {
    const r = await dialAfterRefusals(false, 1_200);
    expect(r.stderr).toMatch(/connection error: .*ECONNREFUSED/);
  });
});
