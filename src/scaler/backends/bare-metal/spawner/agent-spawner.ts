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
  /** Set for a provisional start: tells its spawner it is settled. */
  settle: (() => void) | undefined;
}

/** One agent the spawner started: its output and exit as the spawner reports them. */
export class RelayedChild implements AgentChild {
  readonly stdout = new PassThrough();
  readonly stderr = new PassThrough();
  private closed?: [number | null, NodeJS.Signals | null];
  private readonly waiters: ((code: number | null, signal: NodeJS.Signals | null) => void)[] = [];
  constructor(
    readonly pid: number,
    private readonly settled: () => void = () => {},
  ) {}

  /** A provisional start needs no undoing by the spawner any more (see AgentChild.settle). */
  settle(): void {
    this.settled();
  }

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
 * Until the spawner is ready, and while it is gone, `spawn` answers undefined and the caller starts
 * the agent itself. A spawner that dies (the OOM killer, a stray kill) is started again after a
 * pause that doubles while it keeps dying before it is ready, so an orchestrator that runs for
 * months does not fork itself for every agent from the first such death on.
 */
export class AgentSpawner {
  private proc: ChildProcess | undefined;
  private ready = false;
  private closing = false;
  private next = 1;
  /** Deaths in a row without the spawner becoming ready in between (the restart's backoff). */
  private failures = 0;
  private restartTimer: NodeJS.Timeout | undefined;
  private readonly pending = new Map<number, Pending>();
  private readonly children = new Map<number, RelayedChild>();
  private readonly onGone: (why: string) => void;
  private readonly onReady: (restarted: boolean) => void;
  private readonly restartAfterMs: (failures: number) => number | undefined;
  private readonly entry: string;
  private started = 0;

  constructor(
    onGone: (why: string) => void = () => {},
    opts: {
      /** Told each time a spawner process is ready: the first, or one started again. */
      onReady?: (restarted: boolean) => void;
      /** The pause before starting again after the n-th death in a row; undefined: not again. */
      restartAfterMs?: (failures: number) => number | undefined;
      /** The spawner's compiled entry (tests give one that fails). */
      entry?: string;
    } = {},
  ) {
    this.onGone = onGone;
    this.onReady = opts.onReady ?? (() => {});
    this.restartAfterMs = opts.restartAfterMs ?? restartBackoff;
    this.entry = opts.entry ?? MAIN;
  }

  /** Read-only: whether a start again is scheduled (the spawner is gone, and not closed). */
  get restartPending(): boolean {
    return this.restartTimer !== undefined;
  }

  /** Starts the spawner process; it is usable once it said it is ready. */
  start(): void {
    if (this.proc || this.closing) return;
    this.started++;
    // Its own group: a Ctrl-C meant for the orchestrator's group must not end it first. No
    // environment of the orchestrator's: every agent is given its whole environment.
    const proc = spawn(process.execPath, [this.entry], {
      detached: true,
      stdio: ['pipe', 'pipe', 'inherit'],
      env: { PATH: process.env.PATH ?? '/usr/bin:/bin' },
    });
    this.proc = proc;
    proc.unref();
    proc.stdin!.on('error', () => {});
    (proc.stdin as unknown as { unref?: () => void }).unref?.();
    (proc.stdout as unknown as { unref?: () => void }).unref?.();
    // A dead spawner's last lines can be read after its exit: they answer nothing of a later one.
    createInterface({ input: proc.stdout! }).on('line', (line) => {
      if (this.proc === proc) this.receive(line);
    });
    proc.once('error', (err) => this.gone(proc, `could not start: ${err.message}`));
    proc.once('exit', (code, signal) =>
      this.gone(proc, `exited with ${signal ? `signal ${signal}` : `code ${code}`}`),
    );
  }

  /** Read-only: the spawner's pid while it runs (the parent of the agents it started). */
  get pid(): number | undefined {
    return this.ready ? this.proc?.pid : undefined;
  }

  /**
   * Starts one agent, or answers undefined when the spawner cannot (the caller starts it itself).
   * With `undo`, the start is provisional until the child's `settle()`: should this process die or
   * close the spawner first, the spawner kills the agent's group and removes those paths.
   */
  spawn(l: AgentLaunch, provisional?: { undo: string[] }): Promise<AgentChild> | undefined {
    const proc = this.proc;
    const stdin = proc?.stdin;
    if (!this.ready || !stdin?.writable) return undefined;
    const n = this.next++;
    return new Promise<AgentChild>((ok, failed) => {
      this.pending.set(n, { ok, failed, settle: provisional ? () => this.settled(proc!, n) : undefined });
      stdin.write(`${JSON.stringify({ n, ...l, ...provisional })}\n`);
    });
  }

  /** Tells the spawner that started it that a provisional start is settled (a later one never knew it). */
  private settled(proc: ChildProcess, n: number): void {
    if (this.proc === proc && proc.stdin?.writable) proc.stdin.write(`${JSON.stringify({ settled: n })}\n`);
  }

  /** Ends the spawner; the agents it started run on (their teardown is the backend's). */
  close(): void {
    this.closing = true;
    clearTimeout(this.restartTimer);
    this.restartTimer = undefined;
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
      this.failures = 0;
      this.onReady(this.started > 1);
      return;
    }
    if ('pid' in r) {
      const child = new RelayedChild(r.pid, this.pending.get(r.n)?.settle);
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

  private gone(proc: ChildProcess, why: string): void {
    // Told once per process ('error' and 'exit' can both come), and never about an earlier one.
    if (this.proc !== proc) return;
    this.ready = false;
    this.proc = undefined;
    // A request in flight may or may not have started its agent: the caller's failure path stops
    // whatever carries the agent's id. Agents already started run on, unwatched for their exit
    // (their session, or its absence, tells the orchestrator the rest).
    for (const p of this.pending.values())
      p.failed(Object.assign(new Error(`agent spawner ${why}`), { code: 'ESPAWNER' }));
    this.pending.clear();
    this.children.clear();
    if (this.closing) return;
    this.onGone(why);
    const wait = this.restartAfterMs(++this.failures);
    if (wait === undefined || this.closing) return;
    this.restartTimer = setTimeout(() => {
      this.restartTimer = undefined;
      this.start();
    }, wait);
    // A pending restart never keeps the orchestrator's process alive on its own.
    this.restartTimer.unref();
  }
}

/** 1 s after a death, doubling while it keeps dying before it is ready, at most a minute apart. */
export function restartBackoff(failures: number): number {
  return Math.min(60_000, 1_000 * 2 ** Math.min(failures - 1, 6));
}
