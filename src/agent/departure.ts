import type { AgentLog } from './agent-log.js';
import { waitUntil } from './frames.js';
import type { AgentLink } from './link.js';

/** Exit codes, so a supervisor can tell a finished agent from a refused one. */
export const AgentExit = { ok: 0, error: 1, refused: 2, unreachable: 3 } as const;

/** What leaving may read and ask of the agent. */
export interface DepartureHost {
  readonly log: AgentLog;
  /** A job is running. */
  hasJob(): boolean;
  /** Cancels the running job: its processes are stopped and it is reported cancelled. */
  cancelJob(): void;
  exit(code: number): void;
}

/** What leaving reads of the connection, and the two things it asks of it. */
export type DepartureLink = Pick<AgentLink, 'registered' | 'unsent' | 'unstored' | 'sendNow' | 'close'>;

/**
 * How the agent ends: a drain finishes the current job first, a stop cancels it, an idle or
 * single-use agent leaves once its result is stored, and a refused or stranded one exits with its
 * code. Holds whether the agent is stopping, draining or leaving, and its idle timer; the rest of
 * the agent reads those and asks for the changes.
 */
export class Departure {
  /** Takes no new job; set by a drain or a stop. */
  private isStopping = false;
  /** Finishing the current job, then leaving (first SIGTERM to a static agent). */
  private isDraining = false;
  /** Closing the connection to exit. */
  private isLeaving = false;
  private cancelling: Promise<void> | undefined;
  private idleTimer: NodeJS.Timeout | undefined;

  constructor(
    private readonly link: DepartureLink,
    private readonly host: DepartureHost,
  ) {}

  get stopping(): boolean {
    return this.isStopping;
  }

  get draining(): boolean {
    return this.isDraining;
  }

  get leaving(): boolean {
    return this.isLeaving;
  }

  /**
   * SIGTERM / SIGINT. `drain`: take no new job, finish the current one, report it, then leave.
   * `cancel` (or a second signal during a drain): cancel the job, report it cancelled, and leave.
   */
  stop(reason: string, mode: 'cancel' | 'drain'): Promise<void> {
    if (this.isLeaving) return Promise.resolve();
    if (mode === 'drain' && !this.isStopping) {
      this.isStopping = true;
      this.isDraining = true;
      this.clearIdle();
      this.host.log(
        'info',
        `draining (${reason}): finishing the current job, then leaving; signal again to cancel it`,
      );
      this.link.sendNow({ type: 'agent.draining' });
      // Idle: leave once the last result is acknowledged; with no connection there is no one to wait for.
      if (!this.host.hasJob()) this.leave(!this.link.registered);
      return Promise.resolve();
    }
    this.cancelling ??= this.cancelAndLeave(reason);
    return this.cancelling;
  }

  /**
   * Leave once everything is sent: the outbox is empty and the last result acknowledged. `now`
   * skips that wait (a stop that already gave the result its chance).
   */
  leave(now = false): void {
    if (this.isLeaving) return;
    if (!now) {
      if (!this.link.registered || this.link.unsent) return; // wait for reconnect to deliver results
      if (this.link.unstored) return; // wait until the orchestrator stored the result
    }
    this.isLeaving = true;
    this.isStopping = true;
    if (this.link.close('job finished')) setTimeout(() => this.host.exit(AgentExit.ok), 2_000).unref();
    else this.host.exit(AgentExit.ok);
  }

  /** The connection leave() closed is closed: the agent exits. */
  left(): void {
    this.host.exit(AgentExit.ok);
  }

  /** The orchestrator refused this agent: it exits, once a running job's processes are stopped. */
  refused(): void {
    if (!this.host.hasJob()) return this.host.exit(AgentExit.refused);
    // Revoked mid-job: the job's processes are stopped before the agent exits, not left behind.
    this.isStopping = true;
    this.cancelThenExit(AgentExit.refused);
  }

  /** The orchestrator stayed unreachable too long: the agent gives up, as refused() does. */
  unreachable(): void {
    this.isStopping = true;
    if (!this.host.hasJob()) return this.host.exit(AgentExit.unreachable);
    // The job's clean-up (its background processes) must finish before the process exits.
    this.cancelThenExit(AgentExit.unreachable);
  }

  /** Leaves after `ms` without a job. */
  armIdle(ms: number): void {
    this.clearIdle();
    this.idleTimer = setTimeout(() => {
      this.host.log('info', `idle for ${ms} ms, leaving`);
      this.leave();
    }, ms);
  }

  clearIdle(): void {
    if (this.idleTimer) clearTimeout(this.idleTimer);
    this.idleTimer = undefined;
  }

  private async cancelAndLeave(reason: string): Promise<void> {
    this.isStopping = true;
    this.isDraining = false;
    this.host.log('info', `stopping: ${reason}`);
    if (this.host.hasJob()) {
      this.host.cancelJob();
      await waitUntil(() => !this.host.hasJob(), 10_000);
    }
    // Give the cancelled result a moment to be stored before the connection goes.
    await waitUntil(() => !this.link.registered || (!this.link.unsent && !this.link.unstored), 2_000);
    this.leave(true);
  }

  private cancelThenExit(code: number): void {
    this.host.cancelJob();
    void waitUntil(() => !this.host.hasJob(), 10_000).then(() => this.host.exit(code));
  }
}
