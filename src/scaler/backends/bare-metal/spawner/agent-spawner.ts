import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { PassThrough } from 'node:stream';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { AgentChild, AgentLaunch } from './agent-child.js';

type Reply =
  | { ready: true }
  | { n: number; pid: number }
  | { n: number; err: { code?: string; message: string } }
  | { n: number; o: 1 | 2; d: string }
  | { n: number; c: [number | null, NodeJS.Signals | null] };

interface Pending {
  ok(child: AgentChild): void;
  failed(err: Error): void;
}

/** One agent the spawner started: its output and exit as the spawner reports them. */
export class RelayedChild implements AgentChild {
  readonly stdout = new PassThrough();
  readonly stderr = new PassThrough();
  private closed?: [number | null, NodeJS.Signals | null];
  private readonly waiters: ((code: number | null, signal: NodeJS.Signals | null) => void)[] = [];
  constructor(readonly pid: number) {}

  onClose(cb: (code: number | null, signal: NodeJS.Signals | null) => void): void {
    // Never before the caller is done with its start: a child process's 'close' always comes on a
    // later turn of the event loop, and the backend reads an exit that comes during its own start
    // (an agent that fails at once) as a failure only after the start has been reported.
    const closed = this.closed;
    if (closed) setImmediate(() => cb(...closed));
    else this.waiters.push(cb);
  }

  unref(): void {}

  output(stream: 1 | 2, data: string): void {
    (stream === 1 ? this.stdout : this.stderr).write(data);
  }

  /** Ends the output first, so a reader has every line before it hears of the exit. */
  close(code: number | null, signal: NodeJS.Signals | null): void {
    let open = 2;
    const done = () => {
      if (--open > 0) return;
      this.closed = [code, signal];
      for (const w of this.waiters.splice(0)) w(code, signal);
    };
    const streams = [this.stdout, this.stderr];
    for (const s of streams) {
      s.once('end', done);
      s.end();
    }
    // A stream nobody reads is drained so its end still comes, as a child process's are at its
    // exit; but on a later turn: the start, the output and the exit can arrive in one read, and
    // the backend's readers attach only once its start has resolved. Drained at once, those
    // lines (an agent's last words before it dies) would flow past before anyone listened.
    setImmediate(() => {
      for (const s of streams) if (s.readableFlowing === null) s.resume();
    });
  }
}

/** The compiled entry, found from the package root (five levels up from src/ or dist/), as in tests. */
const MAIN = join(
  dirname(fileURLToPath(import.meta.url)),
  ...['..', '..', '..', '..', '..', 'dist', 'scaler', 'backends', 'bare-metal', 'spawner', 'spawner-main.js'],
);

/**
 * Starts bare-metal agents through a small long-lived process (spawner-main.ts) instead of forking
 * the orchestrator, whose size makes every fork slow. Agents are then the spawner's children: the
 * backend counts the spawner's pid as its own when it tells its agents from another launcher's.
 * Until the spawner is ready, and after it is gone, `spawn` answers undefined and the caller starts
 * the agent itself.
 */
export class AgentSpawner {
  private proc: ChildProcess | undefined;
  private ready = false;
  private closing = false;
  private next = 1;
  private readonly pending = new Map<number, Pending>();
  private readonly children = new Map<number, RelayedChild>();

  constructor(private readonly onGone: (why: string) => void = () => {}) {}

  /** Starts the spawner process; it is usable once it said it is ready. */
  start(): void {
    if (this.proc) return;
    // Its own group: a Ctrl-C meant for the orchestrator's group must not end it first. No
    // environment of the orchestrator's: every agent is given its whole environment.
    const proc = spawn(process.execPath, [MAIN], {
      detached: true,
      stdio: ['pipe', 'pipe', 'inherit'],
      env: { PATH: process.env.PATH ?? '/usr/bin:/bin' },
    });
    this.proc = proc;
    proc.unref();
    proc.stdin!.on('error', () => {});
    (proc.stdin as unknown as { unref?: () => void }).unref?.();
    (proc.stdout as unknown as { unref?: () => void }).unref?.();
    createInterface({ input: proc.stdout! }).on('line', (line) => this.receive(line));
    proc.once('error', (err) => this.gone(`could not start: ${err.message}`));
    proc.once('exit', (code, signal) =>
      this.gone(`exited with ${signal ? `signal ${signal}` : `code ${code}`}`),
    );
  }

  /** Read-only: the spawner's pid while it runs (the parent of the agents it started). */
  get pid(): number | undefined {
    return this.ready ? this.proc?.pid : undefined;
  }

  /** Starts one agent, or answers undefined when the spawner cannot (the caller starts it itself). */
  spawn(l: AgentLaunch): Promise<AgentChild> | undefined {
    const stdin = this.proc?.stdin;
    if (!this.ready || !stdin?.writable) return undefined;
    const n = this.next++;
    return new Promise<AgentChild>((ok, failed) => {
      this.pending.set(n, { ok, failed });
      stdin.write(`${JSON.stringify({ n, ...l })}\n`);
    });
  }

  /** Ends the spawner; the agents it started run on (their teardown is the backend's). */
  close(): void {
    this.closing = true;
    this.proc?.stdin?.end();
  }

  private receive(line: string): void {
    let r: Reply;
    try {
      r = JSON.parse(line) as Reply;
    } catch {
      return;
    }
    if ('ready' in r) {
      this.ready = true;
      return;
    }
    if ('pid' in r) {
      const child = new RelayedChild(r.pid);
      this.children.set(r.n, child);
      this.pending.get(r.n)?.ok(child);
      this.pending.delete(r.n);
    } else if ('err' in r) {
      this.pending.get(r.n)?.failed(Object.assign(new Error(r.err.message), { code: r.err.code }));
      this.pending.delete(r.n);
    } else if ('o' in r) {
      this.children.get(r.n)?.output(r.o, r.d);
    } else if ('c' in r) {
      this.children.get(r.n)?.close(...r.c);
      this.children.delete(r.n);
    }
  }

  private gone(why: string): void {
    if (!this.proc) return;
    this.ready = false;
    this.proc = undefined;
    // A request in flight may or may not have started its agent: the caller's failure path stops
    // whatever carries the agent's id. Agents already started run on, unwatched for their exit
    // (their session, or its absence, tells the orchestrator the rest).
    for (const p of this.pending.values())
      p.failed(Object.assign(new Error(`agent spawner ${why}`), { code: 'ESPAWNER' }));
    this.pending.clear();
    this.children.clear();
    if (!this.closing) this.onGone(why);
  }
}
