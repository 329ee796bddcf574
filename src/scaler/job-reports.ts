/**
 * What a spawn says about the job it is bound to (a lifecycle note, a failed start) goes out at once,
 * except for a job whose run is still being stored (dispatch/early-provision.ts): its notes would
 * name a job that neither the queue nor the store holds yet, so they wait until it is stored, and go
 * if it never is.
 */
export class JobReports {
  private readonly held = new Map<string, (() => void)[]>();

  /** From now on, this job's reports wait for `release`. */
  hold(jobId: string): void {
    if (!this.held.has(jobId)) this.held.set(jobId, []);
  }

  /** The job's run was stored (its reports go out now, in order) or was not (they are dropped). */
  release(jobId: string, stored: boolean): void {
    const waiting = this.held.get(jobId);
    this.held.delete(jobId);
    if (stored) for (const report of waiting ?? []) report();
  }

  /** Send one report about the job, or keep it while the job is held. */
  send(jobId: string, report: () => void): void {
    const waiting = this.held.get(jobId);
    if (waiting) waiting.push(report);
    else report();
  }
}
