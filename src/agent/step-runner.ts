import { spawn } from 'node:child_process';
import type { LogStream } from '../protocol/messages.js';
import { onLines } from '../util/lines.js';
import { startTicksOf } from '../util/proc-tree.js';
import { setLongTimeout, type LongTimer } from '../util/long-timer.js';
import type { PidMark } from '../util/pid-window.js';
import { STEP_SHELL, type ReadyShell } from './ready-shell.js';

export interface StepOutcome {
  exitCode: number | null;
  timedOut: boolean;
  cancelled: boolean;
  error?: string;
}

export interface RunningStep {
  done: Promise<StepOutcome>;
  /** The step's process group (its shell's pid), for the job's final clean-up. */
  pgid: number | undefined;
  /** When its shell started (clock ticks since boot); every process of the step is younger. */
  startTicks: number | undefined;
  /** Its shell was started ahead (ready-shell.ts): its pid and the host's pid counters before it. */
  readyMark: PidMark | undefined;
  /** Stop the step's whole process group: SIGTERM, then SIGKILL after the grace. */
  cancel(kind: 'cancel' | 'timeout'): void;
  /** Stop reading output that background processes still write; resolves once the pipes are closed. */
  release(): Promise<void>;
  /** Stop reading output for a while (the link to the orchestrator is congested); writers block. */
  pause(): void;
  resume(): void;
}

const KILL_GRACE_MS = 5_000;
/**
 * After the shell exits, its output pipes are read this much longer, then let go: a background
 * process that inherited them (`server &`) must not hold the step open. See docs/step-runner.md.
 */
export const OUTPUT_DRAIN_MS = 200;
/** At the end of the job, how long the last output in a step's pipes may take to arrive. */
const RELEASE_WAIT_MS = 1_000;

/**
 * Run one step with /bin/sh in its own process group. The step ends when its shell exits; anything
 * it started in the background keeps running and is the job's to clean up (job-runner.ts). With a
 * `ready` shell (started ahead, ready-shell.ts) the step becomes that process instead of a new one.
 */
export function runStep(opts: {
  script: string;
  cwd: string;
  env: NodeJS.ProcessEnv;
  timeoutMs?: number | undefined;
  drainMs?: number;
  ready?: ReadyShell | undefined;
  onLine: (stream: LogStream, line: string) => void;
}): RunningStep {
  const onReady = opts.ready?.handOver(opts.script, opts.cwd, opts.env) ? opts.ready : undefined;
  if (opts.ready && !onReady) opts.ready.discard();
  const child =
    onReady?.child ??
    spawn(STEP_SHELL, ['-c', opts.script], {
      cwd: opts.cwd,
      env: opts.env,
      detached: true,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
  let stopReason: 'cancel' | 'timeout' | undefined;
  let killTimer: NodeJS.Timeout | undefined;
  let shellExited = false;

  const signalGroup = (sig: NodeJS.Signals) => {
    if (child.pid === undefined) return;
    try {
      process.kill(-child.pid, sig);
    } catch {
      // already gone
    }
  };
  const cancel = (kind: 'cancel' | 'timeout') => {
    if (stopReason || shellExited) return;
    stopReason = kind;
    signalGroup('SIGTERM');
    killTimer = setTimeout(() => signalGroup('SIGKILL'), KILL_GRACE_MS);
    killTimer.unref();
  };
  const timeout: LongTimer | undefined = opts.timeoutMs
    ? setLongTimeout(() => cancel('timeout'), opts.timeoutMs)
    : undefined;

  onLines(child.stdout, (line) => opts.onLine('stdout', line));
  onLines(child.stderr, (line) => opts.onLine('stderr', line));

  let pipesClosed = false;
  const closed = new Promise<void>((resolve) =>
    child.on('close', () => {
      pipesClosed = true;
      resolve();
    }),
  );
  const done = new Promise<StepOutcome>((resolve) => {
    let spawnError: string | undefined;
    let exit: { code: number | null; signal: NodeJS.Signals | null } | undefined;
    let drainTimer: NodeJS.Timeout | undefined;
    const finish = () => {
      if (drainTimer) clearTimeout(drainTimer);
      timeout?.clear();
      const code = exit?.code ?? null;
      const signal = exit?.signal ?? null;
      resolve({
        exitCode: code ?? (signal ? 128 + signalNumber(signal) : null),
        timedOut: stopReason === 'timeout',
        cancelled: stopReason === 'cancel',
        ...(spawnError ? { error: spawnError } : {}),
      });
    };
    child.on('error', (err) => {
      spawnError = err.message;
    });
    child.on('exit', (code, signal) => {
      shellExited = true;
      exit = { code, signal };
      timeout?.clear();
      if (killTimer) clearTimeout(killTimer);
      // Output still in the pipes gets a moment to arrive. After that the step is over even if a
      // background process holds the pipes; they are still read (a writer to a closed pipe would
      // die of SIGPIPE) until the job releases them.
      drainTimer = setTimeout(finish, opts.drainMs ?? OUTPUT_DRAIN_MS);
    });
    // Normally the pipes close right after the shell exits. A failed spawn has no 'exit', only this.
    void closed.then(finish);
  });
  let paused = false;
  const pause = () => {
    if (paused || pipesClosed) return;
    paused = true;
    child.stdout?.pause();
    child.stderr?.pause();
  };
  const resume = () => {
    if (!paused) return;
    paused = false;
    child.stdout?.resume();
    child.stderr?.resume();
  };
  const release = async () => {
    if (pipesClosed) return;
    // What is still in the pipes is read first; a writer that outlived the clean-up cannot hold us.
    resume();
    await Promise.race([closed, new Promise((r) => setTimeout(r, RELEASE_WAIT_MS))]);
    child.stdout?.destroy();
    child.stderr?.destroy();
    await closed;
  };
  // Read now: the shell stays at least a zombie until Node reaps it, which cannot happen yet.
  const startTicks = child.pid === undefined ? undefined : startTicksOf(child.pid);
  return { done, cancel, release, pause, resume, pgid: child.pid, startTicks, readyMark: onReady?.mark };
}

const SIGNALS: Record<string, number> = { SIGHUP: 1, SIGINT: 2, SIGQUIT: 3, SIGKILL: 9, SIGTERM: 15 };
function signalNumber(sig: NodeJS.Signals): number {
  return SIGNALS[sig] ?? 0;
}
