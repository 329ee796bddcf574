import { spawn, type ChildProcess } from 'node:child_process';
import { statSync } from 'node:fs';
import type { DeadManSwitch } from './dead-man.js';
import { markCounters, type PidMark } from '../util/pid-window.js';
import { startTicksOf } from '../util/proc-tree.js';

/**
 * A step's shell, started before its job arrives. Spawning a process from the agent (a large Node
 * process) costs several milliseconds of fork and exec; a warm agent pays that while it is idle, and
 * the job's first step only hands its script, environment and working directory over.
 *
 * The launcher is `/bin/sh -s` in its own process group (the step's group, as a direct spawn makes
 * it) with its output pipes already attached, and its standard input the hand-over channel. It
 * starts with an empty environment and reads nothing until the step is handed over: then it changes
 * to the step's directory, exports exactly the step's environment, and replaces itself by the
 * step's shell with /dev/null as input. Until then it holds no job's data, and it serves one step
 * only. When the agent goes away its end of the channel closes, and the idle launcher reads the end
 * of its input and exits.
 */
export interface StepLauncher {
  readonly child: ChildProcess;
  /** The host's pid counters just before it was spawned (the job's first process is this one). */
  readonly counters: Omit<PidMark, 'pid'> | undefined;
  /** When it started (clock ticks since boot): every process of the step is younger. */
  readonly startTicks: number | undefined;
  /** The dead-man switch already told of its group while it waited, if any. */
  guardedBy?: DeadManSwitch | undefined;
}

/** Names a POSIX shell can export; a step with any other name is spawned directly. */
const EXPORTABLE = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** `s` as one single-quoted shell word. */
export function shellQuote(s: string): string {
  return `'${s.replaceAll("'", `'\\''`)}'`;
}

/**
 * What the launcher runs to become the step, or undefined when the step cannot go through it (a
 * variable name the shell cannot export, or a working directory that is not one: a direct spawn
 * reports that as the step's start error).
 *
 * The launcher's own shell may have put variables in its environment (the working directory
 * variables, a nesting level); they are removed first, so the step sees only its own.
 */
export function handOver(opts: { script: string; cwd: string; env: NodeJS.ProcessEnv }): string | undefined {
  const vars: string[] = [];
  for (const [k, v] of Object.entries(opts.env)) {
    if (v === undefined) continue;
    if (!EXPORTABLE.test(k) || v.includes('\0')) return undefined;
    vars.push(`${k}=${shellQuote(v)}`);
  }
  try {
    if (!statSync(opts.cwd).isDirectory()) return undefined;
  } catch {
    return undefined;
  }
  return (
    `cd -- ${shellQuote(opts.cwd)} || exit 127\n` +
    'unset OLDPWD PWD SHLVL\n' +
    (vars.length ? `export ${vars.join(' ')}\n` : '') +
    `exec /bin/sh -c ${shellQuote(opts.script)} </dev/null\n`
  );
}

/** Start a launcher (undefined if it could not be spawned). It keeps no event loop alive while idle. */
export function spawnLauncher(): StepLauncher | undefined {
  const counters = markCounters();
  let child: ChildProcess;
  try {
    child = spawn('/bin/sh', ['-s'], { env: {}, detached: true, stdio: ['pipe', 'pipe', 'pipe'] });
  } catch {
    return undefined;
  }
  if (child.pid === undefined) {
    child.on('error', () => undefined);
    return undefined;
  }
  child.on('error', () => undefined);
  child.stdin?.on('error', () => undefined);
  setRef(child, false);
  return { child, counters, startTicks: startTicksOf(child.pid) };
}

/** Still waiting for its step (nobody killed it, its channel is open). */
export function usable(l: StepLauncher): boolean {
  const c = l.child;
  return c.exitCode === null && c.signalCode === null && c.stdin?.writable === true;
}

/** Whether the launcher and its pipes keep the agent's event loop alive (only once it is a step). */
export function setRef(child: ChildProcess, on: boolean): void {
  for (const s of [child.stdin, child.stdout, child.stderr]) {
    const h = s as unknown as { ref?: () => void; unref?: () => void } | null;
    if (on) h?.ref?.();
    else h?.unref?.();
  }
  if (on) child.ref();
  else child.unref();
}

/** Stop an unused launcher: its group holds nothing of any job. */
export function discard(l: StepLauncher): void {
  const { child } = l;
  child.stdin?.destroy();
  child.stdout?.destroy();
  child.stderr?.destroy();
  if (child.pid !== undefined && child.exitCode === null && child.signalCode === null) {
    try {
      process.kill(-child.pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }
}

/**
 * The agent's one spare launcher. It is filled only while the agent has no job (its previous job's
 * processes are all stopped by then), so no process of an earlier job can have touched it, and each
 * launcher is taken once.
 */
export class LauncherSlot {
  private spare: StepLauncher | undefined;
  private closed = false;

  /**
   * Start a spare unless one is waiting. `guard`: the agent's dead-man switch, told of the spare's
   * group now, while nothing waits, so a job's start does not wake it.
   */
  fill(guard?: DeadManSwitch): void {
    if (this.closed || (this.spare && usable(this.spare))) return;
    if (this.spare) discard(this.spare);
    this.spare = spawnLauncher();
    if (this.spare && guard?.alive) {
      guard.guard(this.spare.child.pid);
      this.spare.guardedBy = guard;
    }
  }

  /** The spare, for one step; the slot is then empty. */
  take(): StepLauncher | undefined {
    const l = this.spare;
    this.spare = undefined;
    if (l && !usable(l)) {
      discard(l);
      return undefined;
    }
    return l;
  }

  /** The agent is leaving: the spare is stopped and none is started again. */
  close(): void {
    this.closed = true;
    if (this.spare) discard(this.spare);
    this.spare = undefined;
  }

  /** For tests: the waiting launcher's pid. */
  get sparePid(): number | undefined {
    return this.spare?.child.pid;
  }
}
