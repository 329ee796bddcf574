import { readyShellMismatch } from '../../../agent/ready-shell-probe.js';

/**
 * Whether this host's shell starts a step handed to a waiting shell exactly as a directly spawned
 * one (ready-shell-probe.ts): checked once per orchestrator process, in the background, and told
 * to the bare-metal agents it starts (KICI_READY_SHELL=checked). A fresh agent then starts its
 * first step's shell while its registration is answered, instead of spawning it after its job has
 * come, and without four probe spawns of its own.
 */
export class HostShellCheck {
  private verdict: boolean | undefined;
  private running: Promise<boolean> | undefined;

  constructor(private readonly check: () => Promise<string | undefined> = () => readyShellMismatch()) {}

  /** Starts the check the first time; false until it has passed (and for good if it did not). */
  passed(): boolean {
    void this.known();
    return this.verdict === true;
  }

  /** The verdict once the check has run (started by the first call of either method). */
  known(): Promise<boolean> {
    this.running ??= this.check().then(
      (why) => (this.verdict = why === undefined),
      () => (this.verdict = false),
    );
    return this.running;
  }
}

let shared: HostShellCheck | undefined;

/** The process's one check: every bare-metal scaler on the host shares it. */
export function hostShellCheck(): HostShellCheck {
  return (shared ??= new HostShellCheck());
}
