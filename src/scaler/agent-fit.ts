import type { ManagedEntry } from './agent-book.js';
import { resolveResources } from './core/resources.js';
import type { RoutableLabelSet } from './core/routing.js';
import type { ScaleJob } from './types.js';

/**
 * Can this scaler agent take a job of this shape? Only warm agents can be the wrong size. An agent
 * the manager does not track (`undefined`) is not its to refuse.
 */
export function agentFitsJob(
  m: ManagedEntry | undefined,
  job: ScaleJob,
  table: readonly RoutableLabelSet[],
): boolean {
  // A process-mode agent may see a container runtime on its host, but it runs steps on the host.
  if (m && job.container && runsHostProcesses(m, table)) return false;
  if (!m || !m.origin.warm) return true;
  const declared = job.resources;
  if (!declared) return true;
  const want = resolveResources(declared, undefined, undefined);
  for (const side of ['requests', 'limits'] as const) {
    const d = declared[side] ?? declared[side === 'requests' ? 'limits' : 'requests'];
    if (d?.cpus !== undefined && want[side].cpus !== m[side].cpus) return false;
    if (d?.memory !== undefined && want[side].memBytes !== m[side].memBytes) return false;
  }
  return true;
}

function runsHostProcesses(m: ManagedEntry, table: readonly RoutableLabelSet[]): boolean {
  return !!table.find((t) => t.scalerName === m.scalerName && t.key === m.labelSetKey)?.hostProcess;
}
