import type { AgentConfig } from './config.js';

/** First-dial retry of a scaler-started agent (see Redial.inFirstDial), and for how long. */
const FIRST_DIAL_RETRY_MS = 10;
const FIRST_DIAL_WINDOW_MS = 10_000;
/** Backoff while the orchestrator answers 503 (too many connections waiting to register). */
const BUSY_BACKOFF_BASE_MS = 100;
const BUSY_BACKOFF_MAX_MS = 5_000;

/**
 * When the agent dials again after its connection closed: at once while a scaler-started agent's
 * first dial is still being refused, backed off and jittered while the orchestrator is busy, and
 * backed off exponentially otherwise. Also keeps how long the link has been down, which bounds the
 * agent's patience (reconnectTimeoutMs). A registration starts it all over.
 */
export class Redial {
  private disconnectedSince: number | undefined;
  private attempt = 0;
  /** When a scaler-started agent first dialled; see inFirstDial. */
  private firstDialAt: number | undefined;
  private everRegistered = false;
  /** Consecutive 503 answers to our upgrade; the first of a streak is logged, the rest are not. */
  private busyStreak = 0;
  private lastDialBusy = false;

  constructor(private readonly cfg: Readonly<Pick<AgentConfig, 'scalerManaged'>>) {}

  /** A dial starts; the first one opens the first-dial window. */
  dialling(): void {
    this.firstDialAt ??= performance.now();
  }

  /** The orchestrator answered 503; true for the first answer of a streak, the one worth a log line. */
  busy(): boolean {
    this.lastDialBusy = true;
    return this.busyStreak++ === 0;
  }

  /**
   * A scaler-started agent on a firewalled network is refused until the backend's rules for its
   * address apply, which is usually while it is still starting. Those first refusals are expected:
   * retried every FIRST_DIAL_RETRY_MS (every wait is start latency) and not logged.
   */
  inFirstDial(now = performance.now()): boolean {
    return (
      this.cfg.scalerManaged &&
      !this.everRegistered &&
      this.firstDialAt !== undefined &&
      now - this.firstDialAt < FIRST_DIAL_WINDOW_MS
    );
  }

  /** Registered: the next loss backs off from the start again. */
  registered(): void {
    this.busyStreak = 0;
    this.everRegistered = true;
    this.attempt = 0;
    this.disconnectedSince = undefined;
  }

  /** The connection closed at `now`: how long the agent has been without one since it last registered. */
  lost(now: number): number {
    this.disconnectedSince ??= now;
    return now - this.disconnectedSince;
  }

  /** How long to wait before dialling again after a loss at `now`. */
  nextWaitMs(now: number): number {
    const busy = this.lastDialBusy;
    this.lastDialBusy = false;
    return busy
      ? busyBackoffMs(this.busyStreak)
      : this.inFirstDial(now)
        ? FIRST_DIAL_RETRY_MS
        : Math.min(10_000, 250 * 2 ** Math.min(this.attempt++, 6));
  }
}

/**
 * How long to wait after the `streak`-th 503 in a row: exponential from BUSY_BACKOFF_BASE_MS up to
 * BUSY_BACKOFF_MAX_MS, jittered between half and all of it, so agents refused together come back apart.
 */
export function busyBackoffMs(streak: number, random: () => number = Math.random): number {
  const ceiling = Math.min(
    BUSY_BACKOFF_MAX_MS,
    BUSY_BACKOFF_BASE_MS * 2 ** Math.min(Math.max(streak - 1, 0), 10),
  );
  return Math.round(ceiling / 2 + random() * (ceiling / 2));
}
