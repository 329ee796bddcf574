import { access } from 'node:fs/promises';

/**
 * A container agent on a firewalled bridge may not dial out before its rules are in force: its
 * address is only known once the container runs. The backend starts it with KICI_START_GATE=<file>
 * and drops that file into the container after the rules apply; until then the agent only waits.
 * Resolves true when the gate opened, false when it stayed shut past `timeoutMs`.
 */
export async function waitForStartGate(path: string, timeoutMs = 120_000, pollMs = 10): Promise<boolean> {
  const until = Date.now() + timeoutMs;
  // PID 1 in a container ignores SIGTERM without a handler; a teardown must not wait for the grace.
  const onTerm = () => process.exit(143);
  process.on('SIGTERM', onTerm);
  try {
    for (;;) {
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
  }
}
