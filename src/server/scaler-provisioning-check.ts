/**
 * The `scaler:<name>` rows of `kici-admin diagnose`: one row per scaler backend, judged on the spawn
 * failures of the last five minutes. Pure: the caller hands in the backends, the failure records
 * and the time.
 */
import type { FailureRecord } from '../scaler/core/failure-tracker.js';

/** Failures older than this are history, not a current problem. */
export const SCALER_FAILURE_WINDOW_MS = 300_000;
const LAST_ERROR_CHARS = 120;

export type CheckStatus = 'PASS' | 'WARN' | 'FAIL';

export interface ProvisioningBackendView {
  name: string;
  type: string;
  activeCount: number;
  /** Removed from the config by a reload; its agents finish their jobs first. */
  retiring: boolean;
}

export interface ProvisioningRow {
  name: string;
  status: CheckStatus;
  message: string;
  details: {
    windowMs: number;
    backendType: string;
    boundCount: number;
    unboundCount: number;
    lastError: string | null;
    lastAtMs: number | null;
    retiring: boolean;
    activeCount: number;
  } | null;
}

function truncate(s: string): string {
  return s.length > LAST_ERROR_CHARS ? `${s.slice(0, LAST_ERROR_CHARS - 1)}…` : s;
}

export function scalerProvisioningRows(
  backends: readonly ProvisioningBackendView[],
  records: readonly FailureRecord[],
  nowMs: number,
): ProvisioningRow[] {
  if (backends.length === 0)
    return [{ name: 'scaler', status: 'PASS', message: 'No scaler backends configured', details: null }];
  const recent = records.filter((r) => r.atMs > nowMs - SCALER_FAILURE_WINDOW_MS);
  return backends.map((b) => {
    const mine = recent.filter((r) => r.scalerName === b.name);
    const bound = mine.filter((r) => r.bound).length;
    const unbound = mine.length - bound;
    const last = mine.reduce<FailureRecord | undefined>(
      (a, r) => (!a || r.atMs >= a.atMs ? r : a),
      undefined,
    );
    const lastError = last ? `${last.kind}: ${last.detail}` : null;
    const status: CheckStatus = bound > 0 ? 'FAIL' : unbound > 0 ? 'WARN' : 'PASS';
    const summary =
      mine.length === 0
        ? '0 spawn failures in last 5m'
        : `${mine.length} spawn failures in last 5m (${bound} bound, ${unbound} warm-pool; last: ${truncate(lastError!)})`;
    const prefix = b.retiring ? `retiring (${b.activeCount} agent(s) left) — ` : '';
    return {
      name: `scaler:${b.name}`,
      status,
      message: prefix + summary,
      details: {
        windowMs: SCALER_FAILURE_WINDOW_MS,
        backendType: b.type,
        boundCount: bound,
        unboundCount: unbound,
        lastError,
        lastAtMs: last?.atMs ?? null,
        retiring: b.retiring,
        activeCount: b.activeCount,
      },
    };
  });
}
