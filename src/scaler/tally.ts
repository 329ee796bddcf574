/**
 * Counts of scaler events that have no live state to read at scrape time: refusals, cap-lock
 * failures, re-dispatch wake-ups and warm-pool churn. The scaler bumps them where they happen; the
 * metrics copy them on each scrape, so the two can never disagree.
 */
export class ScalerTally {
  /** Spawns a cap (count or resources, per scaler or global) turned away. */
  spawnRefusals = 0;
  readonly capLockFailures = { contended: 0, unreachable: 0 };
  /** Queue re-drives: `hook` when capacity was freed, `sweep` from the periodic retry. */
  readonly redispatch = { hook: 0, sweep: 0 };
  readonly warmSpawns = new Map<string, number>();
  readonly warmReaped = new Map<string, number>();

  warmSpawned(scaler: string): void {
    this.warmSpawns.set(scaler, (this.warmSpawns.get(scaler) ?? 0) + 1);
  }

  warmReap(scaler: string): void {
    this.warmReaped.set(scaler, (this.warmReaped.get(scaler) ?? 0) + 1);
  }

  /** A cap-lock wait that PostgreSQL gave up (`lock_timeout`) is contention; anything else is the store. */
  capLockFailed(err: unknown): void {
    const code = (err as { code?: unknown } | null)?.code;
    if (code === '55P03') this.capLockFailures.contended++;
    else this.capLockFailures.unreachable++;
  }
}
