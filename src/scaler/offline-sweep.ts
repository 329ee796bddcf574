/**
 * The orphan sweep with no orchestrator running (a full data disk keeps it from starting): each
 * scaler whose backend can tell its leftovers apart on the host alone is built as a sweeper and
 * swept. No store is opened and nothing is written outside the leftovers being removed.
 */
import type { ScalerConfig } from '../config/index.js';
import { errorMessage } from '../util/errors.js';
import type { SweepDeps } from './backends/descriptor.js';
import { descriptorFor } from './backends/registry.js';
import type { OrphanItem } from './types.js';

/** One sweep over every scaler: what was removed (or would be), and the scalers whose sweep failed. */
export interface OrphanSweepReport {
  dryRun: boolean;
  items: (OrphanItem & { scaler: string })[];
  errors: { scaler: string; message: string }[];
}

export interface OfflineSweepReport extends OrphanSweepReport {
  /** Scalers whose leftovers only the running orchestrator can tell apart, with why. */
  skipped: { scaler: string; reason: string }[];
}

/**
 * With no agent registry to ask, every agent counts as registered: a running container is never
 * taken, so what goes is stopped containers, rule sets no container holds and dead VMs' leftovers.
 */
const assumeRegistered = () => true;

export async function sweepOffline(
  config: ScalerConfig,
  deps: SweepDeps,
  dryRun: boolean,
): Promise<OfflineSweepReport> {
  const report: OfflineSweepReport = { dryRun, items: [], errors: [], skipped: [] };
  for (const entry of config.scalers) {
    const descriptor = descriptorFor(entry);
    if (!descriptor.sweeper) {
      report.skipped.push({
        scaler: entry.name,
        reason: `a ${entry.type} scaler's leftovers can only be told apart by the running orchestrator`,
      });
      continue;
    }
    try {
      const sweeper = await descriptor.sweeper(entry, deps);
      await sweeper.cleanupOrphans(assumeRegistered, {
        dryRun,
        requested: true,
        onItem: (item) => report.items.push({ scaler: entry.name, ...item }),
      });
    } catch (err) {
      report.errors.push({ scaler: entry.name, message: errorMessage(err) });
    }
  }
  return report;
}
