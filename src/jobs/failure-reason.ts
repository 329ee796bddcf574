/**
 * A failed job always says why. When the agent sent no message (a step simply exited non-zero), the
 * failing step and its exit code are the reason, so `job get` never shows "-" for a failure.
 */
export interface StepOutcome {
  idx: number;
  name: string;
  exit_code: number | null;
  timed_out: boolean;
  finished_at: Date | null;
}

export function failureReason(steps: readonly StepOutcome[], exitCode: number | null): string {
  const failed = [...steps]
    .reverse()
    .find((s) => s.finished_at !== null && (s.timed_out || (s.exit_code !== null && s.exit_code !== 0)));
  if (failed) {
    if (failed.timed_out) return `step "${failed.name}" timed out`;
    return `step "${failed.name}" exited with ${failed.exit_code}`;
  }
  const unfinished = [...steps].reverse().find((s) => s.finished_at === null);
  if (unfinished) return `step "${unfinished.name}" did not finish`;
  return exitCode === null ? 'the job failed without an exit code' : `the job exited with ${exitCode}`;
}

/** The stored reason, or for a failed job without one, the reason derived from its steps. */
export function reasonFor(
  state: string,
  reason: string | null,
  steps: readonly StepOutcome[],
  exitCode: number | null,
): string | null {
  if (reason || state !== 'failed') return reason;
  return failureReason(steps, exitCode);
}
