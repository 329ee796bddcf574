/**
 * A session's bookkeeping writes (the agents row, the token's last use, a single-use agent's job
 * count), held from the moment a job is sent to the agent until that job has started.
 *
 * Why: on the embedded database a write runs in this process's event loop, its statement and its
 * sync included, and nothing else runs meanwhile. Issued right after a `job.assign`, these three
 * writes were still running when the agent's `job.started` and `step.started` arrived, and the
 * step's start is stamped when its frame is handled: every cold start and warm hit waited about
 * 4 ms for bookkeeping that decides nothing on the way. Held, they go once the job's first step has
 * been stamped, or its result or refusal came, or the connection closed or the server began to close
 * it, whichever is first.
 *
 * The count the job-count write keeps is also held in memory by the connected agent, and a
 * reconnect reads both (agent-registration.ts), so holding it opens no gap for a second job.
 */
export class HeldBookkeeping {
  private held: (() => void)[] | undefined;

  /** A job is on its way to the agent: writes wait from now. */
  hold(): void {
    this.held ??= [];
  }

  /** Issues the write now, or once the hold ends; held writes go in the order they were given. */
  write(issue: () => void): void {
    if (this.held) this.held.push(issue);
    else issue();
  }

  /** The job started, ended or was refused, or the connection closed: the held writes go. */
  release(): void {
    const held = this.held;
    this.held = undefined;
    for (const issue of held ?? []) issue();
  }
}

/** The agent frames after which a held write no longer delays the job's start. */
export const RELEASING_FRAMES: ReadonlySet<string> = new Set([
  'step.started',
  'job.finished',
  'job.rejected',
]);
