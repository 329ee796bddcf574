import type { Dispatcher } from '../dispatch/dispatcher.js';
import { newId, toQueued } from '../dispatch/job-rows.js';
import { sealedNames } from '../dispatch/sealed-env.js';
import type { JobRow, Store } from '../store/index.js';

export type RetryResult =
  | { kind: 'retried'; job: JobRow }
  | { kind: 'not-found' }
  | { kind: 'open'; job: JobRow; open: JobRow }
  | { kind: 'sealed'; job: JobRow };

/**
 * `job retry`: a finished job runs again as a new job (new id) in the same run. The old row stays as
 * it was, so its result, log and reason remain readable next to the new attempt's.
 */
export async function retryJob(
  store: Store,
  dispatcher: Dispatcher,
  jobId: string,
  now: Date,
): Promise<RetryResult> {
  // A provisioning job's claim code was handed out once and never stored: another attempt would
  // run without it. The scaler provisions again on its own when the work still needs an agent.
  const before = await store.jobs.get(jobId);
  if (before && sealedNames(before.spec).length) return { kind: 'sealed', job: before };
  const res = await store.jobs.insertRetry(jobId, newId('j'), now);
  if (!res) return { kind: 'not-found' };
  if ('open' in res) {
    const job = (await store.jobs.get(jobId))!;
    return { kind: 'open', job, open: res.open };
  }
  dispatcher.queue.add(toQueued(res.row));
  void dispatcher.requestPump();
  return { kind: 'retried', job: res.row };
}
