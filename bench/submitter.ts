/**
 * The client of the cold-start benches, in a process of its own: it sends each submit over a kept
 * alive `node:http` connection and says when the request left, on the wall clock. A CI front end
 * is another process; a client inside the bench's own process built each request and read each
 * answer on the same event loop as the orchestrator under test, so the orchestrator's figure
 * carried the client's work too.
 *
 * Protocol, one JSON object per line: on stdin `{i, url, headers, body}`; on stdout `{ready}` once,
 * then `{i, at, status, body}` per submit, `at` the time the request was written (ms since the
 * epoch, with fractions).
 */
import { Agent, request } from 'node:http';
import { serveLines } from './line-child.ts';

interface Submit {
  i: number;
  url: string;
  headers: Record<string, string>;
  body: string;
}

const agent = new Agent({ keepAlive: true, maxSockets: 1 });

function once(s: Submit): Promise<{ at: number; status: number; body: string }> {
  return new Promise((ok, failed) => {
    const req = request(
      s.url,
      { method: 'POST', agent, headers: { ...s.headers, 'content-length': Buffer.byteLength(s.body) } },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => ok({ at, status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString() }));
        res.on('error', failed);
      },
    );
    req.on('error', failed);
    const at = performance.timeOrigin + performance.now();
    req.end(s.body);
  });
}

// One submit at a time, in the order asked.
serveLines<Submit>(once, () => agent.destroy());
