/**
 * The `limits:<name>` rows of `kici-admin diagnose`: one per scaler that was asked to enforce
 * agent limits, saying which mechanism holds them, or (WARN) which do not hold and how to fix it.
 * Pure: the caller hands in what each backend reports.
 */
import type { CheckStatus } from './scaler-provisioning-check.js';

export interface LimitsView {
  name: string;
  strategy: string;
  enforced: boolean;
  message: string;
  fix: string | null;
}

export interface LimitsRow {
  name: string;
  status: CheckStatus;
  message: string;
  details: { strategy: string; fix: string | null };
}

export function limitsRows(views: readonly LimitsView[]): LimitsRow[] {
  // A scaler that did not ask for limits has nothing to check.
  return views
    .filter((v) => v.strategy !== 'off')
    .map((v) => ({
      name: `limits:${v.name}`,
      // A fix means some limit does not hold: none (advisory), or one a manager cannot apply.
      status: v.fix ? 'WARN' : 'PASS',
      message: `${v.enforced ? `agent limits ${v.message}` : v.message}${v.fix ? `; fix: ${v.fix}` : ''}`,
      details: { strategy: v.strategy, fix: v.fix },
    }));
}
