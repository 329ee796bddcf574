import { spawn, type ChildProcess } from 'node:child_process';
import { markCounters, type PidMark } from '../util/pid-window.js';

/** The shell every step runs in (step-runner.ts). */
export const STEP_SHELL = '/bin/sh';

/** A name the shell can export. */
const NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** One word for the POSIX shell, taken literally whatever it holds (newlines included). */
function quote(s: string): string {
  return `'${s.replaceAll("'", `'\\''`)}'`;
}

/**
 * The one command line that turns a waiting shell into the step: standard input from /dev/null,
 * `cd -P` into the step's directory (resolved as chdir(2) resolves it), the step's variables
 * exported (and the two that `cd` itself sets removed first), then `exec <shell> -c <script>`. The
 * waiting shell was started with an empty environment, so the step's shell starts with exactly the
 * step's variables, in the same directory, with the same argv, as a direct spawn would start it;
 * `readyShellMismatch` (ready-shell-probe.ts) checks that this host's shell passes on nothing else.
 * The shell parses the whole line before it runs any of it, so redirecting its input first loses
 * nothing. Undefined when the environment cannot be said this way (a name the shell cannot export,
 * or a NUL byte anywhere): that step is then spawned directly.
 */
export function handOverLine(
  script: string,
  cwd: string,
  env: NodeJS.ProcessEnv,
  shell = STEP_SHELL,
): string | undefined {
  const assignments: string[] = [];
  for (const [k, v] of Object.entries(env)) {
    if (v === undefined) continue;
    if (!NAME.test(k) || v.includes('\0')) return undefined;
    assignments.push(`${k}=${quote(v)}`);
  }
  if (script.includes('\0') || cwd.includes('\0')) return undefined;
  const exported = assignments.length ? ` && export ${assignments.join(' ')}` : '';
  return `exec </dev/null; cd -P -- ${quote(cwd)} && unset OLDPWD PWD${exported} && exec ${shell} -c ${quote(script)}\n`;
}

/**
 * A step's shell started ahead of the step: the fork, which copies the agent's whole Node process
 * and is the largest cost of a step's start, is paid while the agent is idle instead of after the
 * job arrived. It waits reading its standard input, in its own process group, with the step's
 * output pipes already in place; `handOver` then makes it the step (see handOverLine). Nothing of
 * a job reaches it before that, and it leaves at the end of its input when the agent goes away.
 */
export class ReadyShell {
  /** The host's pid counters just before it was started: the job's processes are all younger. */
  readonly mark: PidMark | undefined;
  private exited = false;
  private taken = false;

  private constructor(
    readonly child: ChildProcess,
    counters: Omit<PidMark, 'pid'> | undefined,
    private readonly shell: string,
  ) {
    this.mark = counters && child.pid !== undefined ? { pid: child.pid, ...counters } : undefined;
    child.once('exit', () => (this.exited = true));
    child.on('error', () => (this.exited = true));
    child.stdin?.on('error', () => undefined);
    // Waiting costs nothing and keeps nothing alive: the agent decides when it ends.
    child.unref();
    for (const s of [child.stdin, child.stdout, child.stderr])
      (s as unknown as { unref?: () => void } | null)?.unref?.();
  }

  /** Starts one, or undefined when the spawn failed at once. */
  static start(shell = STEP_SHELL): ReadyShell | undefined {
    const counters = markCounters();
    try {
      const child = spawn(shell, ['-s'], {
        // Where a relative working directory resolves, as for a step spawned directly.
        cwd: process.cwd(),
        env: {},
        detached: true,
        stdio: ['pipe', 'pipe', 'pipe'],
      });
      return child.pid === undefined ? undefined : new ReadyShell(child, counters, shell);
    } catch {
      return undefined;
    }
  }

  /** Still waiting, and nobody has taken it. */
  get usable(): boolean {
    return !this.taken && !this.exited && this.child.exitCode === null && this.child.stdin?.writable === true;
  }

  /**
   * Makes it the step. Returns false (and it stays usable) when the environment or the script cannot
   * be handed over this way; the caller then spawns the step itself.
   */
  handOver(script: string, cwd: string, env: NodeJS.ProcessEnv): boolean {
    const line = this.usable ? handOverLine(script, cwd, env, this.shell) : undefined;
    if (line === undefined) return false;
    this.taken = true;
    this.child.ref();
    for (const s of [this.child.stdout, this.child.stderr])
      (s as unknown as { ref?: () => void } | null)?.ref?.();
    this.child.stdin!.end(line);
    return true;
  }

  /** Not needed after all: it reads the end of its input and exits. */
  discard(): void {
    if (this.taken) return;
    this.taken = true;
    this.child.stdin?.end();
  }
}
