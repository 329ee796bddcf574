import { spawn, type ChildProcess } from 'node:child_process';

/**
 * Reads step process groups, one per line, until "done" (the agent cleaned up after itself: exit
 * quietly) or end of input. "clear" forgets the groups given so far (a job ended and its processes
 * were stopped; the watcher stays for the next job). End of input without "done" means the agent
 * died (SIGKILL, OOM, a crash) before it could clean up: every group still held is killed.
 */
const WATCH =
  'g=""; while read -r l; do [ "$l" = done ] && exit 0; if [ "$l" = clear ]; then g=""; else g="$g $l"; fi; done; for p in $g; do kill -KILL -"$p" 2>/dev/null; done';

/**
 * A job's dead-man switch: a tiny shell in its own process group (so it outlives the agent and is
 * not caught by the job's own clean-up) holding the read end of a pipe from the agent. The kernel
 * closes the agent's end however the agent ends, so no step of the job outlives an agent that was
 * killed outright.
 */
export class DeadManSwitch {
  private readonly child: ChildProcess | undefined;
  private disarmed = false;
  private exited = false;

  /**
   * `reusable`: one watcher for every job of an agent, started before the first job is assigned, so
   * no job's start waits for a process to be spawned. A job's end then forgets its groups instead of
   * ending the watcher.
   */
  constructor(private readonly reusable = false) {
    try {
      this.child = spawn('/bin/sh', ['-c', WATCH], {
        detached: true,
        stdio: ['pipe', 'ignore', 'ignore'],
        env: { PATH: process.env.PATH ?? '/usr/bin:/bin' },
      });
      this.child.on('error', () => undefined);
      this.child.on('exit', () => (this.exited = true));
      this.child.stdin?.on('error', () => undefined);
      // Neither the watcher nor its pipe keeps the agent's event loop alive.
      this.child.unref();
      (this.child.stdin as unknown as { unref?: () => void } | null)?.unref?.();
    } catch {
      this.child = undefined;
    }
  }

  /** Kill this process group if the agent dies before disarm(). */
  guard(pgid: number | undefined): void {
    if (pgid === undefined || this.disarmed || !this.child?.stdin?.writable) return;
    this.child.stdin.write(`${pgid}\n`);
  }

  /** Is it still watching? A watcher someone killed is replaced before the next job. */
  get alive(): boolean {
    return this.child !== undefined && !this.exited && !this.disarmed && this.child.stdin?.writable === true;
  }

  /**
   * The job's processes were stopped by the agent itself: a job's own watcher leaves without a
   * kill, the agent's watcher forgets them and waits for the next job.
   */
  release(): void {
    if (!this.reusable) return this.disarm();
    if (this.alive) this.child!.stdin!.write('clear\n');
  }

  /** The agent is done with the watcher: it leaves without a kill. */
  disarm(): void {
    if (this.disarmed) return;
    this.disarmed = true;
    if (this.child?.stdin?.writable) this.child.stdin.end('done\n');
  }
}
