/**
 * `POST /api/v1/scaler/reap-orphans`: every backend that cleans orphans is asked to remove compute
 * (and firewall rules) that no live agent of this orchestrator owns, or, in a dry run, to list it.
 */
import type { Dispatcher } from '../dispatch/dispatcher.js';
import type { OrphanSweepReport } from '../scaler/offline-sweep.js';
import { errorMessage } from '../util/errors.js';
import type { Logger } from '../util/logger.js';

/** What was removed (or would be, in a dry run), per scaler, and the scalers whose sweep failed. */
export type ReapOrphansReport = OrphanSweepReport;

export async function reapOrphans(
  dispatcher: Dispatcher,
  dryRun: boolean,
  log: Logger,
): Promise<ReapOrphansReport> {
  const scaler = dispatcher.scaler;
  const report: ReapOrphansReport = { dryRun, items: [], errors: [] };
  if (!scaler) return report;
  // An agent counts as live while it is connected here or the scaler still tracks it (spawning,
  // reconnecting after a restart): its compute is never an orphan.
  const isRegistered = (id: string) => dispatcher.registry.get(id) !== undefined || scaler.isManaged(id);
  for (const b of scaler.backendList()) {
    if (!b.cleanupOrphans || !b.capabilities.cleansOrphans) continue;
    try {
      await b.cleanupOrphans(isRegistered, {
        dryRun,
        requested: true,
        onItem: (item) => report.items.push({ scaler: b.name, ...item }),
      });
    } catch (err) {
      report.errors.push({ scaler: b.name, message: errorMessage(err) });
      log.warn({ scaler: b.name, err: errorMessage(err) }, 'orphan sweep failed');
    }
  }
  if (!dryRun && report.items.length)
    log.info({ removed: report.items.length }, 'reap-orphans removed compute no live agent owned');
  return report;
}
