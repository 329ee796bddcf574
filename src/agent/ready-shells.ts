import { ReadyShell } from './ready-shell.js';
import { readyShellMismatch } from './ready-shell-probe.js';

/**
 * The agent's one ready shell (ready-shell.ts): taken by the next step, started again once the
 * agent has been idle a moment. Only the agent starts or discards it (`prepare`,
 * `prepareWhenIdle`, `close`); a job takes it with `take`. Before the first one, the host's shell is
 * checked once (ready-shell-probe.ts); where it does not pass, every step is spawned directly.
 */
export class ReadyShells {
  private shell: ReadyShell | undefined;
  private idleTimer: NodeJS.Timeout | undefined;
  private closed = false;
  private verdict: 'usable' | 'unusable' | undefined;
  private checking: Promise<void> | undefined;

  constructor(
    private readonly enabled = true,
    private readonly check: () => Promise<string | undefined> = () => readyShellMismatch(),
    private readonly onUnusable: (why: string) => void = () => undefined,
  ) {}

  /** Read-only: whether this host's shell passed the check (undefined until it ran). */
  get usable(): boolean | undefined {
    return this.verdict === undefined ? undefined : this.verdict === 'usable';
  }

  /** Checks the host's shell once (later calls wait for that one); resolves whether it passed. */
  async checked(): Promise<boolean> {
    this.checking ??= this.check()
      .catch((err: unknown) => `the check failed: ${(err as Error).message}`)
      .then((why) => {
        this.verdict = why === undefined ? 'usable' : 'unusable';
        if (why !== undefined) return this.onUnusable(why);
        // Checked while idle: the first shell is started now, ready for the next step.
        if (!this.shell) this.prepare();
      });
    await this.checking;
    return this.verdict === 'usable';
  }

  /** Has one waiting (starts it unless one is already usable). */
  prepare(): void {
    this.cancelIdle();
    if (!this.enabled || this.closed || this.shell?.usable) return;
    if (this.verdict === undefined) return void this.checked();
    if (this.verdict === 'usable') this.shell = ReadyShell.start();
  }

  /**
   * Starts one if no job came within `ms`. Under a stream of jobs the next one arrives first: the
   * spawn would then only delay it (it blocks the agent's event loop) and save nothing.
   */
  prepareWhenIdle(ms: number): void {
    this.cancelIdle();
    if (!this.enabled || this.closed || this.shell?.usable || this.verdict === 'unusable') return;
    this.idleTimer = setTimeout(() => this.prepare(), ms);
    this.idleTimer.unref();
  }

  /** The waiting shell, now the caller's; undefined when none is ready. */
  take(): ReadyShell | undefined {
    this.cancelIdle();
    const s = this.shell;
    this.shell = undefined;
    if (s?.usable) return s;
    s?.discard();
    return undefined;
  }

  close(): void {
    this.closed = true;
    this.cancelIdle();
    this.shell?.discard();
    this.shell = undefined;
  }

  private cancelIdle(): void {
    if (this.idleTimer) clearTimeout(this.idleTimer);
    this.idleTimer = undefined;
  }
}
