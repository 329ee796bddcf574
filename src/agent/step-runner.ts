import { spawn } from 'node:child_process';
import type { LogStream } from '../protocol/messages.js';
import { onLines } from '../util/lines.js';

export interface StepOutcome {
  exitCode: number | null;
  timedOut: boolean;
  cancelled: boolean;
  error?: string;
}

export interface RunningStep {
  done: Promise<StepOutcome>;
  /** Stop the step's whole process group: SIGTERM, then SIGKILL after the grace. */
  cancel(kind: 'cancel' | 'timeout'): void;
}

const KILL_GRACE_MS = 5_000;

/**
 * Run one step with /bin/sh in its own process group, so a timeout or cancel reaches everything
 * the step started, not just the shell.
 */
export function runStep(opts: {
  script: string;
  cwd: string;
  env: NodeJS.ProcessEnv;
  timeoutMs?: number | undefined;
  onLine: (stream: LogStream, line: string) => void;
}): RunningStep {
  const child = spawn('/bin/sh', ['-c', opts.script], {
    cwd: opts.cwd,
    env: opts.env,
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stopReason: 'cancel' | 'timeout' | undefined;
  let killTimer: NodeJS.Timeout | undefined;

  const signalGroup = (sig: NodeJS.Signals) => {
    if (child.pid === undefined) return;
    try {
      process.kill(-child.pid, sig);
    } catch {
      // already gone
    }
  };
  const cancel = (kind: 'cancel' | 'timeout') => {
    if (stopReason) return;
    stopReason = kind;
    signalGroup('SIGTERM');
    killTimer = setTimeout(() => signalGroup('SIGKILL'), KILL_GRACE_MS);
    killTimer.unref();
  };
  const timeout = opts.timeoutMs ? setTimeout(() => cancel('timeout'), opts.timeoutMs) : undefined;

  onLines(child.stdout, (line) => opts.onLine('stdout', line));
  onLines(child.stderr, (line) => opts.onLine('stderr', line));

  const done = new Promise<StepOutcome>((resolve) => {
    let spawnError: string | undefined;
    child.on('error', (err) => {
      spawnError = err.message;
    });
    child.on('close', (code, signal) => {
      if (timeout) clearTimeout(timeout);
      if (killTimer) clearTimeout(killTimer);
      // The shell is gone; make sure nothing it left in its group lingers.
      signalGroup('SIGKILL');
      resolve({
        exitCode: code ?? (signal ? 128 + signalNumber(signal) : null),
        timedOut: stopReason === 'timeout',
        cancelled: stopReason === 'cancel',
        ...(spawnError ? { error: spawnError } : {}),
      });
    });
  });
  return { done, cancel };
}

const SIGNALS: Record<string, number> = { SIGHUP: 1, SIGINT: 2, SIGQUIT: 3, SIGKILL: 9, SIGTERM: 15 };
function signalNumber(sig: NodeJS.Signals): number {
  return SIGNALS[sig] ?? 0;
}
