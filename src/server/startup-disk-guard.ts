/**
 * Spec E at start-up: before the store or the logs write anything, a VM host whose disk is full
 * reaps what dead VMs left behind. Still short: a fatal start-up error, after a backoff sleep that
 * keeps a supervisor's restart loop from spinning.
 */
import type { ScalerConfig } from '../config/index.js';
import { runDiskGuard } from '../scaler/backends/registry.js';
import type { BackendDeps } from '../scaler/backends/deps.js';
import { UserError } from '../util/errors.js';
import type { Logger } from '../util/logger.js';

export async function startupDiskGuard(
  config: ScalerConfig,
  o: {
    configPath: string;
    logger: Logger;
    statfs?: BackendDeps['vmStatfs'];
    thresholdBytes?: number;
    backoffMs?: number;
  },
): Promise<void> {
  const res = await runDiskGuard({
    config,
    configPath: o.configPath,
    logger: o.logger,
    ...(o.statfs ? { statfs: o.statfs } : {}),
    ...(o.thresholdBytes !== undefined ? { thresholdBytes: o.thresholdBytes } : {}),
  });
  if (res.recovered) return;
  const volume = config.scalers.find((s) => s.type === 'firecracker')?.chrootBaseDir;
  await new Promise((r) => setTimeout(r, o.backoffMs ?? 30_000));
  throw new UserError(
    `not enough disk space under ${volume} for micro-VMs: ${res.freeBytesAfter} bytes free after reaping stale VM artifacts; free space, then run kici-admin scaler reap-orphans once the orchestrator is up`,
  );
}
