/**
 * Frames written in one turn of the event loop leave as one socket write (hot path: a result's ack
 * and the next job's assignment share a write). Real loopback TCP and real WebSocket framing; the
 * count is taken where the socket hands data to the operating system.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { coalesceWrites } from '../../../src/util/coalesce-writes.js';
import { loopbackPair, type LoopbackPair } from '../../helpers/loopback-ws.js';

const open: LoopbackPair[] = [];
afterEach(() => {
  for (const p of open.splice(0)) p.close();
});

async function pair(): Promise<LoopbackPair> {
  const p = await loopbackPair();
  open.push(p);
  return p;
}

describe('coalesceWrites', () => {
  it('three frames sent in one turn leave in one write and arrive whole, in order', async () => {
    const { server, sock, handoffs, received, arrived } = await pair();
    const hold = coalesceWrites(sock);
    for (const m of ['ack', 'assign', 'note']) {
      hold();
      server.send(m);
    }
    await new Promise((r) => setImmediate(r));
    await arrived(3);
    expect(received).toEqual(['ack', 'assign', 'note']);
    expect(handoffs.length).toBe(1);
  });

  it('without it each frame is its own write; a later turn opens a new write', async () => {
    const { server, sock, handoffs, received, arrived } = await pair();
    for (const m of ['a', 'b', 'c']) server.send(m);
    expect(handoffs.length).toBe(3);
    const hold = coalesceWrites(sock);
    hold();
    server.send('d');
    await new Promise((r) => setImmediate(r));
    hold();
    server.send('e');
    await new Promise((r) => setImmediate(r));
    await arrived(5);
    expect(received).toEqual(['a', 'b', 'c', 'd', 'e']);
    // 'd' and 'e' were held in different turns: one write each, never merged across turns.
    expect(handoffs.length).toBe(5);
  });

  it('flush() lets the held frames go at once, in one write, without waiting for the turn to end', async () => {
    const { server, sock, handoffs, received, arrived } = await pair();
    const hold = coalesceWrites(sock);
    for (const m of ['ack', 'assign']) {
      hold();
      server.send(m);
    }
    expect(handoffs.length).toBe(0);
    hold.flush();
    // Handed to the kernel before this turn ends: no immediate has run yet.
    expect(handoffs.length).toBe(1);
    hold();
    server.send('note');
    expect(handoffs.length).toBe(1);
    await new Promise((r) => setImmediate(r));
    await arrived(3);
    expect(received).toEqual(['ack', 'assign', 'note']);
    expect(handoffs.length).toBe(2);
  });
});
