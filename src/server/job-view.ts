import type { JobRow } from '../store/index.js';

/**
 * A job as the API shows it. Its own module so that every route file that answers with a job can
 * share it without importing createHttpApi back. `waiting` is the queue's live note on why a
 * queued job has not started; without one, the last provisioning error stands in for it.
 */
export function jobView(row: JobRow, waiting?: string) {
  return {
    id: row.id,
    runId: row.run_id,
    name: row.name,
    state: row.state,
    runsOn: row.runs_on,
    priority: row.priority,
    owner: row.owner,
    agentId: row.agent_id,
    logTruncated: row.log_truncated,
    exitCode: row.exit_code,
    reason: row.reason,
    waiting: row.state === 'queued' ? (waiting ?? row.last_provisioning_error ?? null) : null,
    lastProvisioningError: row.last_provisioning_error,
    attempts: row.attempts,
    attempt: row.attempt,
    retryOf: row.retry_of,
    createdAt: row.created_at,
    dispatchedAt: row.dispatched_at,
    startedAt: row.started_at,
    finishedAt: row.finished_at,
  };
}
