/**
 * What the agent socket hands to the kernel, and when: a registration's answer leaves on its own,
 * before the bound job's claim has committed, so the agent reads it meanwhile; the assignment then
 * follows in a write of its own. Real loopback TCP and WebSocket framing, the real session, store
 * and dispatcher (manager harness); the count is taken where the socket hands data to the kernel.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { handleAgentSocket } from '../../../src/server/agent-socket.js';
import { loopbackPair, type LoopbackPair } from '../../helpers/loopback-ws.js';
import { spawnToken } from '../../helpers/harness-agents.js';
import { useManagerHarnesses } from '../../helpers/manager-harness.js';
import { bareMetal } from '../../helpers/scaler-config.js';

const hs = useManagerHarnesses();
let open: LoopbackPair | undefined;
afterEach(() => {
  open?.close();
  open = undefined;
});

describe('the agent socket', () => {
  it("hands a registration's answer to the kernel before the bound job's assignment, in its own write", async () => {
    const h = await hs.make({ config: { version: 1, scalers: [bareMetal('alpha', [['linux']])] } });
    const b = h.backend('alpha');
    await h.submit({ a: { runsOn: ['linux'] } });
    const [id] = b.pendingIds();
    b.resolveSpawn(id!);
    await h.settle();
    open = await loopbackPair();
    const { server, sock, client, handoffs } = open;
    handleAgentSocket(server, h.sessionDeps(), 'test', sock);
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
