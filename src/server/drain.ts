import type { Dispatcher } from '../dispatch/dispatcher.js';
import type { Store } from '../store/index.js';
import type { Logger } from '../util/logger.js';
import { swallow } from '../util/swallowed-errors.js';

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

/**
 * At stop, the jobs on agents that go away with this process: `teardown` puts a job that was handed
 * out but never started back in the queue and fails a started one (it cannot be resumed); `leave`
 * touches neither and keeps their agents. Returns the agents kept alive.
 */
export async function settleJobsAtStop(
  d: Dispatcher,
  store: Store,
  agents: 'teardown' | 'leave',
  log: Logger,
): Promise<Set<string>> {
  const kept = new Set<string>();
  for (const a of [...d.active.values()]) {
    const agent = d.registry.get(a.agentId);
    const goesAway = !agent || agent.kind === 'scaler';
    if (!goesAway) continue;
    if (agents === 'leave') {
      // Not even a dispatched job is requeued: its agent may be starting it right now.
      kept.add(a.agentId);
      continue;
    }
    if (a.state === 'dispatched')
      await store.jobs
        .requeue(a.job.id, a.agentId)
        .catch(swallow(log, 'shutdown.requeue', { jobId: a.job.id }));
    else
      await d.active.settleActive(
        a.job.id,
        'failed',
        null,
        'orchestrator shut down while the job was running',
        false,
      );
  }
  return kept;
}
