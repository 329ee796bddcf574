import { normalizeLabelSet, type ScalerEntry } from '../../../config/index.js';
import type { ConfinementPlan } from './confinement-plan.js';

/**
 * What a bare-metal scaler cannot promise, said once when it is built (and again for a reload's
 * policies): the trust model and network policies it cannot enforce. Limits it cannot enforce are
 * said by the backend once, from its limits strategy.
 */
export function constructionWarnings(entry: ScalerEntry, plan: ConfinementPlan, withTrust = true): string[] {
  const out: string[] = [];
  const processSets = entry.labelSets.filter((ls) => ls.binaryPath);
  if (withTrust && processSets.length) {
    const open = plan.sets.filter((s) => s.mode === 'host');
    out.push(
      open.length
        ? `scaler "${entry.name}": bare-metal agents run as host processes with the orchestrator user's filesystem and network access (label sets ${open.map((s) => `[${s.labelSet}]`).join(', ')}, trust: host); remove trust: host to confine them, or use containers or micro-VMs for untrusted builds`
        : `scaler "${entry.name}": bare-metal agents share the host's network and kernel even when confined; use containers or micro-VMs for untrusted builds`,
    );
  }
  for (const ls of processSets) {
    if (ls.networkPolicy && !ls.image) {
      out.push(
        `scaler "${entry.name}" label set [${normalizeLabelSet(ls.labels)}]: networkPolicy cannot be enforced on bare-metal agent processes (only in job-image mode); remove it or use a container label set`,
      );
    }
  }
  return out;
}
