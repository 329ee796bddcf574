/**
 * What a bare-metal scaler says about how it holds its agents in: their limits and each label set's
 * confinement, once in the log and as the read-only views status and diagnose show.
 */
import type { ScalerEntry } from '../../../config/index.js';
import type { Logger } from '../../../util/logger.js';
import type { AgentLimits } from './agent-limits.js';
import type { HostFacts } from './confinement.js';
import {
  describeConfinement,
  hostTrustRisk,
  planConfinement,
  type ConfinementPlan,
} from './confinement-plan.js';

/** How the agents' limits are held, said when the scaler is built. */
export function announceLimits(log: Logger, scaler: string, limits: AgentLimits): void {
  // Said once, at start-up: the operator asked for limits this host cannot (fully) give.
  const advisory = limits.advisory;
  if (advisory)
    log.warn(
      { limits: limits.strategy, fix: advisory.fix },
      `scaler "${scaler}": ${advisory.problem}. Fix: ${advisory.fix}`,
    );
  if (limits.enforced)
    log.info({ limits: limits.strategy }, `scaler "${scaler}": limits ${limits.describe()}`);
}

/** Which mechanism holds the agents' limits, and what to do when none can. */
export function limitsView(limits: AgentLimits): {
  strategy: string;
  enforced: boolean;
  message: string;
  fix: string | null;
} {
  return {
    strategy: limits.strategy,
    enforced: limits.enforced,
    message: limits.describe(),
    fix: limits.advisory?.fix ?? null,
  };
}

/** The plan for `entry`, said in the log: which mechanism confines each set's jobs, and why. */
export function announcedPlan(
  log: Logger,
  entry: ScalerEntry,
  hostFacts: HostFacts,
  hostEnv: NodeJS.ProcessEnv,
): ConfinementPlan {
  const plan = planConfinement(entry, hostFacts, hostEnv);
  for (const s of plan.sets) {
    if (s.mode === 'host')
      log.warn({ labelSet: s.labelSet, confinement: s.mode }, hostTrustRisk(entry.name, s));
    else log.info({ labelSet: s.labelSet, confinement: s.mode }, describeConfinement(entry.name, s));
  }
  return plan;
}

/** Each process-mode label set's confinement, and the risk of an unconfined one. */
export function confinementView(
  scaler: string,
  plan: ConfinementPlan,
): { labelSet: string; mode: string; chosen: string; risk: string | null }[] {
  return plan.sets.map((s) => ({
    labelSet: s.labelSet,
    mode: s.mode,
    chosen: s.chosen,
    risk: s.mode === 'host' ? hostTrustRisk(scaler, s) : null,
  }));
}
