import { normalizeLabelSet, type ScalerEntry } from '../../../config/index.js';
import { sandboxRequested } from './tools.js';

/**
 * What a bare-metal scaler cannot promise, said once when it is built (and again for a reload's
 * policies): the trust model, network policies it cannot enforce, and limits it cannot enforce.
 */
export function constructionWarnings(
  entry: ScalerEntry,
  hostEnv: NodeJS.ProcessEnv,
  cgroupsUsable: boolean,
  withTrust = true,
): string[] {
  const out: string[] = [];
  const processSets = entry.labelSets.filter((ls) => ls.binaryPath);
  if (withTrust && processSets.length) {
    const open = processSets.filter((ls) => !sandboxRequested(ls, hostEnv) && ls.runAsUser !== 'dynamic');
    out.push(
      open.length
        ? `scaler "${entry.name}": bare-metal agents run as host processes with the orchestrator user's filesystem and network access (label sets ${open.map((ls) => `[${normalizeLabelSet(ls.labels)}]`).join(', ')}); use KICI_SANDBOX=true (bubblewrap), runAsUser: dynamic, containers or micro-VMs for untrusted builds`
        : `scaler "${entry.name}": bare-metal agents share the host's network and kernel even when sandboxed; use containers or micro-VMs for untrusted builds`,
    );
  }
  for (const ls of processSets) {
    if (ls.networkPolicy && !ls.image) {
      out.push(
        `scaler "${entry.name}" label set [${normalizeLabelSet(ls.labels)}]: networkPolicy cannot be enforced on bare-metal agent processes (only in job-image mode); remove it or use a container label set`,
      );
    }
  }
  if (entry.enforceCgroups && !cgroupsUsable) {
    out.push(
      `scaler "${entry.name}": enforceCgroups is set but this host has no usable cgroup hierarchy under /sys/fs/cgroup; CPU and memory limits are advisory only (run on Linux as root, or drop enforceCgroups)`,
    );
  }
  return out;
}
