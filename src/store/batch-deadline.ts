/**
 * The one pending deadline of a group commit's batch: `go` runs once by the earliest time any
 * write asked for. A later write with a later deadline leaves the earlier one standing; an earlier
 * one moves it. Owned by the group commit alone (group-commit.ts).
 */
export class BatchDeadline {
  private timer: { cancel(): void } | undefined;
  /** When `go` runs at the latest (performance.now() time); Infinity when nothing is pending. */
  private dueAt = Infinity;

  constructor(private readonly go: () => void) {}

  /** Make sure `go` runs by `due` (performance.now() time). */
  arm(due: number): void {
    if (this.timer && this.dueAt <= due) return;
    this.cancel();
    this.dueAt = due;
    const go = this.go;
    const withinMs = due - performance.now();
    if (withinMs <= 0) {
      // Not unref'd: an unref'd immediate can wait in the poll phase for unrelated I/O or a timer.
      const h = setImmediate(go);
      this.timer = { cancel: () => clearImmediate(h) };
    } else {
      // Rounded up: a timer is kept in whole milliseconds of the loop's clock, so 59.9 would be 59.
      const h = setTimeout(go, Math.ceil(withinMs)).unref();
      this.timer = { cancel: () => clearTimeout(h) };
    }
  }

  cancel(): void {
    this.timer?.cancel();
    this.timer = undefined;
    this.dueAt = Infinity;
  }
}
