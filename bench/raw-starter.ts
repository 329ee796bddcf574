/**
 * The raw start of an agent, timed from a small process: spawn the agent binary, wait for its
 * first message on a bare WebSocket server, kill it. Run as a child of the bench so that the fork
 * is a fork of a bare Node, as it is from an operator's shell or service manager: forked from the
 * bench itself, which holds the orchestrators under test (several hundred MiB), the spawn call
 * alone took about 20 ms on this host, a cost no raw start pays (our own agents are forked by a
 * small spawner process for the same reason, docs/backends.md).
 *
 * Protocol, one JSON object per line: on stdin `{i, file, args, env, uid?, gid?}` (env without the URL, which
 * is this process's own server); on stdout `{ready}` once, then `{i, took, at}` per start: `took` in
 * ms, `at` the spawn's time on the wall clock (ms since the epoch, with fractions).
 */
import { spawn } from 'node:child_process';
import { WebSocketServer } from 'ws';
import { serveLines } from './line-child.ts';

interface Start {
  i: number;
  file: string;
  args: string[];
  env: Record<string, string>;
  /** Set for a confined start whose uid the forker switches (see launch.ts). */
  uid?: number;
  gid?: number;
}

const wss = new WebSocketServer({ host: '127.0.0.1', port: 0 });
await new Promise((r) => wss.once('listening', r));
const url = `ws://127.0.0.1:${(wss.address() as { port: number }).port}/ws`;

async function once(s: Start): Promise<{ took: number; at: number }> {
  const registered = new Promise<number>((res) =>
    wss.once('connection', (ws) => ws.once('message', () => res(performance.now()))),
  );
  const t0 = performance.now();
  const child = spawn(s.file, s.args, {
    detached: true,
    stdio: 'ignore',
    env: { ...s.env, KICI_ORCHESTRATOR_URL: url },
    ...(s.uid !== undefined ? { uid: s.uid, gid: s.gid } : {}),
  });
  const took = (await registered) - t0;
  const exited = new Promise((r) => child.once('exit', r));
  process.kill(-child.pid!, 'SIGKILL');
  await exited;
  return { took, at: performance.timeOrigin + t0 };
}

// One start at a time, in the order asked.
serveLines<Start>(once, () => wss.close());
