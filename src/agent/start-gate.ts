import { access } from 'node:fs/promises';

/** The signal a container backend sends once the agent's firewall rules are in force. */
export const START_GATE_SIGNAL = 'SIGUSR2';

export interface StartGate {
  /** Resolves true once the gate is open, false when it stayed shut for `timeoutMs`. */
  wait(timeoutMs?: number, pollMs?: number): Promise<boolean>;
}

/**
 * A container agent on a firewalled bridge may not dial out before its rules are in force: its
 * address is only known once the container runs. The backend starts it with KICI_START_GATE set and,
 * after the rules apply, opens the gate: by sending START_GATE_SIGNAL (repeated until the agent
 * registers, since one sent before our handler exists is dropped for PID 1), or by creating the
 * file KICI_START_GATE names. Until then the agent only waits.
 *
 * Armed by the entry module before the agent's code loads: the backend's first signal usually
 * arrives while Node is still importing, and catching it saves waiting for a repeat.
 */
export function armStartGate(path: string): StartGate {
  let open = false;
  let wake: (() => void) | undefined;
  const onGate = () => {
    open = true;
    wake?.();
  };
  // PID 1 in a container ignores SIGTERM without a handler; a teardown must not wait for the grace.
  const onTerm = () => process.exit(143);
  process.on(START_GATE_SIGNAL, onGate);
  process.on('SIGTERM', onTerm);
  const fileExists = () =>
    access(path).then(
      () => true,
      () => false,
    );
  return {
    async wait(timeoutMs = 120_000, pollMs = 10) {
      const until = Date.now() + timeoutMs;
      try {
        while (!open) {
          if (await fileExists()) return true;
          if (Date.now() > until) return false;
          await new Promise<void>((r) => {
            wake = r;
            setTimeout(r, pollMs);
          });
        }
        return true;
      } finally {
        wake = undefined;
        process.off('SIGTERM', onTerm);
        // Late repeats of the signal must stay harmless (its default action would end a non-init
        // agent): the no-op goes on before ours comes off, so no instant is left without a handler.
        process.on(START_GATE_SIGNAL, () => {});
        process.off(START_GATE_SIGNAL, onGate);
      }
    },
  };
}
