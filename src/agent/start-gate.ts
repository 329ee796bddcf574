import { access } from 'node:fs/promises';

/** The signal a container backend sends once the agent's firewall rules are in force. */
export const START_GATE_SIGNAL = 'SIGUSR2';

/**
 * A container agent on a firewalled bridge may not dial out before its rules are in force: its
 * address is only known once the container runs. The backend starts it with KICI_START_GATE set and,
 * after the rules apply, opens the gate: by sending START_GATE_SIGNAL (repeated until the agent
 * registers, since one sent before our handler exists is dropped for PID 1), or by creating the
 * file KICI_START_GATE names. Until then the agent only waits. False when it stayed shut too long.
 */
export async function waitForStartGate(path: string, timeoutMs = 120_000, pollMs = 10): Promise<boolean> {
  const until = Date.now() + timeoutMs;
  let signalled = false;
  const onGate = () => {
    signalled = true;
  };
  // PID 1 in a container ignores SIGTERM without a handler; a teardown must not wait for the grace.
  const onTerm = () => process.exit(143);
  process.on(START_GATE_SIGNAL, onGate);
  process.on('SIGTERM', onTerm);
  try {
    for (;;) {
      if (signalled) return true;
      if (
        await access(path).then(
          () => true,
          () => false,
        )
      )
        return true;
      if (Date.now() > until) return false;
      await new Promise((r) => setTimeout(r, pollMs));
    }
  } finally {
    process.off('SIGTERM', onTerm);
    // Late repeats of the signal must stay harmless (its default action would end a non-init agent).
    process.off(START_GATE_SIGNAL, onGate);
    process.on(START_GATE_SIGNAL, () => {});
  }
}
