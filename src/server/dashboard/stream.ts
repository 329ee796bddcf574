import type { Context } from 'hono';
import { streamSSE } from 'hono/streaming';
import type { Dispatcher } from '../../dispatch/dispatcher.js';

/** How often a connected page is checked for a change; a change is sent at once, nothing else is. */
const CHECK_MS = 500;

/**
 * A short fingerprint of what the dashboard shows: queue, running jobs, agents, log volume, and the
 * batches of job writes stored (a job's new state is in memory before the page can read it).
 */
export function liveDigest(d: Dispatcher): string {
  const agents = d.registry.list().map((a) => `${a.id}:${d.registry.stateOf(a)}`);
  const active = [...d.active.values()].map((a) => `${a.job.id}:${a.state}`);
  const scaler = d.scaler?.entries().map((e) => `${e.agentId}:${e.phase}`) ?? [];
  return [`queue:${d.queue.size}:${d.queue.changes}`, active, agents, scaler, d.logs.pushed, d.writes.settled]
    .flat()
    .join('|');
}

/**
 * Server-Sent Events: `change` whenever the digest moves (the page then re-reads what it shows
 * through the JSON API), and a comment every 15 s so proxies keep the stream open. A page that
 * loses the stream (an orchestrator restart) reconnects by itself: EventSource retries after the
 * `retry` delay it was given.
 */
export function liveStream(c: Context, d: Dispatcher, ending: () => boolean = () => false) {
  // The socket goes with the stream: a kept-alive one would hold the server open at shutdown.
  c.header('connection', 'close');
  return streamSSE(c, async (stream) => {
    let last = '';
    let quiet = 0;
    await stream.writeSSE({ event: 'hello', data: '{}', retry: 1000 });
    // Ends when the orchestrator stops, so its server is not held open by pages still watching.
    while (!stream.aborted && !stream.closed && !ending()) {
      const now = liveDigest(d);
      if (now !== last) {
        last = now;
        quiet = 0;
        await stream.writeSSE({ event: 'change', data: '{}' });
      } else if (++quiet * CHECK_MS >= 15_000) {
        quiet = 0;
        await stream.write(': keep-alive\n\n');
      }
      await stream.sleep(CHECK_MS);
    }
  });
}
