import type {
  AgentMessage,
  JobStartedMessage,
  StepFinishedMessage,
  StepStartedMessage,
} from '../protocol/messages.js';

/** Progress marks: they say what happened, and nothing waits on them. */
export type Mark = JobStartedMessage | StepStartedMessage | StepFinishedMessage;

export function isMark(m: AgentMessage): m is Mark {
  return m.type === 'job.started' || m.type === 'step.started' || m.type === 'step.finished';
}

/**
 * How long a mark may wait for company. A job's marks come between awaits (a workspace is made, a
 * step runs, processes are reaped), so sent at once each is a write of its own, and each write wakes
 * the orchestrator; on a virtual machine a wake-up costs more CPU than handling the message. Held
 * back, a job's start leaves with its first step's start, and a step's end with the job's result
 * or the next step's start. The job runner releases held marks before each step runs, so nothing
 * a job does happens before the orchestrator has heard that it started. The orchestrator stores
 * marks with their job's next commit anyway (at most 250 ms later).
 */
export const MARK_HOLD_MS = 100;

export interface MarkHoldTimers {
  now(): number;
  set(fn: () => void, ms: number): { clear(): void };
}

const realTimers: MarkHoldTimers = {
  now: () => performance.now(),
  set: (fn, ms) => {
    const h = setTimeout(fn, ms);
    return { clear: () => clearTimeout(h) };
  },
};

/**
 * Holds marks for up to `holdMs`, and releases them, in order and ahead of it, as soon as any other
 * message is sent. Each released mark says how long it was held (`heldMs`), so the orchestrator
 * still stamps the moment it happened; a duration on the agent's own clock, so no clock skew enters.
 */
export class MarkHold {
  private held: { mark: Mark; at: number }[] = [];
  private timer: { clear(): void } | undefined;

  constructor(
    private readonly deliver: (m: AgentMessage) => void,
    private readonly holdMs = MARK_HOLD_MS,
    private readonly timers: MarkHoldTimers = realTimers,
  ) {}

  send(m: AgentMessage): void {
    if (isMark(m) && this.holdMs > 0) {
      this.held.push({ mark: m, at: this.timers.now() });
      this.timer ??= this.timers.set(() => this.release(), this.holdMs);
      return;
    }
    this.release();
    this.deliver(m);
  }

  /** Send every held mark now. */
  release(): void {
    this.timer?.clear();
    this.timer = undefined;
    const held = this.held;
    if (!held.length) return;
    this.held = [];
    const now = this.timers.now();
    for (const { mark, at } of held) {
      const heldMs = Math.max(0, Math.round(now - at));
      this.deliver(heldMs ? { ...mark, heldMs } : mark);
    }
  }

  get size(): number {
    return this.held.length;
  }
}
