/**
 * The agent spawner: a small, long-lived process that starts bare-metal agents for the
 * orchestrator. Forking copies the parent's page tables, so a child of the orchestrator (hundreds
 * of MiB once its store is open) costs several times what a child of this process does, on every
 * cold start. Of ours it loads only the launch itself (agent-child.ts, which the orchestrator's own
 * fallback uses too): its start and size stay those of a bare Node.
 *
 * Protocol (one JSON object per line): requests on stdin `{n, file, args, env, token}`; on stdout
 * `{ready}` once, then per request `{n, pid}` or `{n, err}`, its output `{n, o: 1|2, d}` and at the
 * end `{n, c: [code, signal]}` (after its output). It exits when stdin ends, leaving its agents
 * running, as the orchestrator's own death would: they are re-adopted or reaped by the next one.
 */
import { createInterface } from 'node:readline';
import { spawnDirect, type AgentLaunch } from './agent-child.js';

type Request = AgentLaunch & { n: number };

function send(msg: object): void {
  process.stdout.write(`${JSON.stringify(msg)}\n`);
}

/** The same launch as the orchestrator's own (token on its descriptor), its output and exit relayed. */
function start(r: Request): void {
  const { n, ...launch } = r;
  spawnDirect(launch).then(
    (child) => {
      send({ n, pid: child.pid });
      for (const [o, s] of [
        [1, child.stdout],
        [2, child.stderr],
      ] as const) {
        s.setEncoding('utf8');
        s.on('data', (d: string) => send({ n, o, d }));
      }
      // 'close' follows the end of both output streams, so the client has every line before the exit.
      child.onClose((code, signal) => send({ n, c: [code, signal] }));
    },
    (e: NodeJS.ErrnoException) => send({ n, err: { code: e.code, message: e.message } }),
  );
}

// Terminal signals meant for the orchestrator's group do not reach this one (it runs in its own);
// the end of stdin is its only way out.
process.stdout.on('error', () => process.exit(0));
const lines = createInterface({ input: process.stdin });
lines.on('line', (line) => {
  let r: Request;
  try {
    r = JSON.parse(line) as Request;
  } catch {
    return; // not a request of ours: without its number there is no one to answer
  }
  try {
    start(r);
  } catch (e) {
    const err = e as NodeJS.ErrnoException;
    send({ n: r.n, err: { code: err.code, message: err.message } });
  }
});
lines.on('close', () => process.exit(0));
send({ ready: true });
