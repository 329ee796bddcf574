import type { CapLockFailure } from './event-cap.js';

/** What drove a queue re-drive: `hook` when capacity was freed, `sweep` from the periodic retry. */
export type RedispatchTrigger = 'hook' | 'sweep';

/**
 * Counts of scaler events that have no live state to read at scrape time: refusals, cap-lock
 * failures, re-dispatch wake-ups, warm-pool churn, failed adoption lookups and refused lifecycle
 * moves. The scaler bumps them where they happen, through the methods below; the metrics copy them
 * on each scrape, so the two can never disagree.
 */
export class ScalerTally {
  #spawnRefusals = 0;
  readonly #capLockFailures: Record<CapLockFailure, number> = { contended: 0, unreachable: 0 };
  readonly #redispatch: Record<RedispatchTrigger, number> = { hook: 0, sweep: 0 };
  readonly #warmSpawns = new Map<string, number>();
  readonly #warmReaped = new Map<string, number>();
  #adoptionLookupFailures = 0;
  #illegalTransitions = 0;

  /** Spawns a cap (count or resources, per scaler or global) turned away. */
  get spawnRefusals(): number {
    return this.#spawnRefusals;
  }

  /** Cluster-wide cap-lock attempts that failed, by why. */
  get capLockFailures(): Readonly<Record<CapLockFailure, number>> {
    return this.#capLockFailures;
  }

  /** Queue re-drives, by what drove them. */
  get redispatch(): Readonly<Record<RedispatchTrigger, number>> {
    return this.#redispatch;
  }

  /** Warm agents a pool started, per scaler. */
  get warmSpawns(): ReadonlyMap<string, number> {
    return this.#warmSpawns;
  }

  /** Idle warm agents a pool reaped past its need, per scaler. */
  get warmReaped(): ReadonlyMap<string, number> {
    return this.#warmReaped;
  }

  /** Adoption lookups the store failed (the agent was refused and retries). */
  get adoptionLookupFailures(): number {
    return this.#adoptionLookupFailures;
  }

  /** Lifecycle moves the table refused: each one is a bug, logged when it happens. */
  get illegalTransitions(): number {
    return this.#illegalTransitions;
  }

  /** A cap turned a spawn away. */
  spawnRefused(): void {
    this.#spawnRefusals++;
  }

  /** A cap-lock attempt failed: `contended` (lock timeout) or `unreachable` (the store). */
  capLockFailed(failure: CapLockFailure): void {
    this.#capLockFailures[failure]++;
  }

  /** The queue was driven again. */
  redispatched(trigger: RedispatchTrigger): void {
    this.#redispatch[trigger]++;
  }

  warmSpawned(scaler: string): void {
    this.#warmSpawns.set(scaler, (this.#warmSpawns.get(scaler) ?? 0) + 1);
  }

  warmReap(scaler: string): void {
    this.#warmReaped.set(scaler, (this.#warmReaped.get(scaler) ?? 0) + 1);
  }

  /** The store could not say whether an agent was adopted. */
  adoptionLookupFailed(): void {
    this.#adoptionLookupFailures++;
  }

  /** The lifecycle table refused a phase change. */
  illegalTransition(): void {
    this.#illegalTransitions++;
  }
}
