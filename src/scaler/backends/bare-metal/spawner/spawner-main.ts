/**
 * The agent spawner: a small, long-lived process that starts bare-metal agents for the
 * orchestrator. Forking copies the parent's page tables, so a child of the orchestrator (hundreds
 * of MiB once its store is open) costs several times what a child of this process does, on every
 * cold start. It imports nothing of ours: its own start and size stay those of a bare Node.
 *
 * Protocol (one JSON object per line): requests on stdin `{n, file, args, env, token}`; on stdout
 * `{ready}` once, then per request `{n, pid}` or `{n, err}`, its output `{n, o: 1|2, d}` and at the
 * end `{n, c: [code, signal]}` (after its output). It exits when stdin ends, leaving its agents
 * running, as the orchestrator's own death would: they are re-adopted or reaped by the next one.
 */
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import type { Writable } from 'node:stream';

interface Request {
  n: number;
  file: string;
  args: string[];
  env: Record<string, string>;
  token: string;
}

/** The descriptor the agent reads its token from (the same as the orchestrator's own launch). */
const TOKEN_FD = 3;

function send(msg: object): void {
  process.stdout.write(`${JSON.stringify(msg)}\n`);
}

function start(r: Request): void {
  const child = spawn(r.file, r.args, {
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe', 'pipe'],
    env: r.env,
  });
  child.once('error', (e: NodeJS.ErrnoException) => {
    send({ n: r.n, err: { code: e.code, message: e.message } });
  });
  child.once('spawn', () => {
    send({ n: r.n, pid: child.pid });
    const handoff = child.stdio[TOKEN_FD] as Writable | null;
    // An agent that dies before reading it breaks the pipe; its exit is reported on its own.
    handoff?.on('error', () => {});
    handoff?.end(`${r.token}\n`);
  });
  for (const [o, s] of [
    [1, child.stdout],
    [2, child.stderr],
  ] as const) {
    s?.setEncoding('utf8');
    s?.on('data', (d: string) => send({ n: r.n, o, d }));
  }
  // 'close' follows the end of both output streams, so the client has every line before the exit.
  child.once('close', (code, signal) => send({ n: r.n, c: [code, signal] }));
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
    return;
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
