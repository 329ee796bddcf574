import { Hono } from 'hono';
import { describe, expect, it } from 'vitest';
import { bodyCap } from '../../../src/server/body-cap.js';

/** An app whose one route echoes the body's length; the cap is 16 bytes. */
function app(): { app: Hono; reached: string[] } {
  const reached: string[] = [];
  const a = new Hono();
  a.use(
    '*',
    bodyCap(16, (c) => c.json({ error: 'payload too large' }, 413)),
  );
  a.all('/echo', async (c) => {
    const text = await c.req.text();
    reached.push(text);
    return c.json({ length: text.length });
  });
  return { app: a, reached };
}

/** A body that arrives in pieces, with no length said ahead (sent chunked). */
function streamed(...pieces: string[]): ReadableStream<Uint8Array> {
  return new ReadableStream({
    start(ctl) {
      for (const p of pieces) ctl.enqueue(new TextEncoder().encode(p));
      ctl.close();
    },
  });
}

describe('bodyCap', () => {
  it('judges a body by its declared length: over the cap is refused before the route runs', async () => {
    const { app: a, reached } = app();
    const res = await a.request('/echo', {
      method: 'POST',
      body: 'x'.repeat(17),
      headers: { 'content-length': '17' },
    });
    expect(res.status).toBe(413);
    expect(reached).toEqual([]);
  });

  it('lets a body within its declared length through, whole', async () => {
    const { app: a, reached } = app();
    const res = await a.request('/echo', {
      method: 'POST',
      body: 'x'.repeat(16),
      headers: { 'content-length': '16' },
    });
    expect(res.status).toBe(200);
    expect(reached).toEqual(['x'.repeat(16)]);
  });

  it('counts a chunked body as it streams: within the cap it reaches the route whole', async () => {
    const { app: a, reached } = app();
    const res = await a.request('/echo', {
      method: 'POST',
      body: streamed('abcdefgh', 'ijklmnop'),
      headers: { 'transfer-encoding': 'chunked' },
      duplex: 'half',
    } as RequestInit);
    expect(res.status).toBe(200);
    expect(reached).toEqual(['abcdefghijklmnop']);
  });

  it('refuses a chunked body once it passes the cap', async () => {
    const { app: a, reached } = app();
    const res = await a.request('/echo', {
      method: 'POST',
      body: streamed('abcdefgh', 'ijklmnop', 'q'),
      headers: { 'transfer-encoding': 'chunked' },
      duplex: 'half',
    } as RequestInit);
    expect(res.status).toBe(413);
    expect(reached).toEqual([]);
  });

  it('passes a request with no body', async () => {
    const { app: a, reached } = app();
    const res = await a.request('/echo');
    expect(res.status).toBe(200);
    expect(reached).toEqual(['']);
  });
});
