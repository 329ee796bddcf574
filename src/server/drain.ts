import type { Dispatcher } from '../dispatch/dispatcher.js';

/** How long, after the last job ended, single-use agents get to leave on their own. */
const LEAVE_GRACE_MS = 3_000;

/**
 * The waiting half of a graceful stop: resolves true once no job is active, false when `timeoutMs`
 * passed first (or `cancelled()` turned true: the server is stopping anyway).
 */
export async function waitForDrain(
  d: Dispatcher,
  timeoutMs: number,
  cancelled: () => boolean,
): Promise<boolean> {
  const until = Date.now() + timeoutMs;
  const waitWhile = async (busy: () => boolean, deadline: number) => {
    while (busy() && !cancelled()) {
      const left = deadline - Date.now();
      if (left <= 0) return;
      await new Promise((r) => setTimeout(r, Math.min(100, left)));
    }
  };
  await waitWhile(() => d.active.size > 0, until);
  const drained = d.active.size === 0;
  // Single-use agents that just reported a result leave on their own once it is acknowledged;
  // closing their socket first would leave them retrying a server that is gone.
  const leaving = () => d.registry.list().some((a) => a.ephemeral && a.jobsTaken > 0 && !a.busyJobId);
  if (drained) await waitWhile(leaving, Math.min(until, Date.now() + LEAVE_GRACE_MS));
  return drained;
}
