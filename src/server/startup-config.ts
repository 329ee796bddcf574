import type { ScalerConfig } from '../config/index.js';
import { checkScalerConfig } from '../scaler/startup-checks.js';
import { UserError } from '../util/errors.js';
import type { Logger } from '../util/logger.js';
import type { OrchestratorOptions } from './orchestrator-options.js';

/**
 * The scaler config start-up runs on, after the same checks `kici-admin scaler validate` runs: every
 * problem is listed in one UserError. Host drivers a test or embedder injected are theirs to check.
 */
export async function loadCheckedScalerConfig(opts: OrchestratorOptions, log: Logger): Promise<ScalerConfig> {
  const statfs = opts.startupDiskGuard?.statfs ?? opts.backendDeps?.vmStatfs;
  const threshold = opts.startupDiskGuard?.thresholdBytes ?? opts.backendDeps?.vmDiskThresholdBytes;
  const res = await checkScalerConfig(opts.scalerConfigPath!, opts.scalerConfigDir, {
    mode: 'serve',
    env: opts.hostEnv ?? process.env,
    ...(opts.isolation || opts.backendDeps?.isolationFor ? { probeNft: false as const } : {}),
    ...(statfs ? { statfs } : {}),
    ...(threshold !== undefined ? { diskThresholdBytes: threshold } : {}),
  });
  if (!res.ok)
    throw new UserError(`invalid scaler configuration:\n  ${res.problems.join('\n  ')}`, res.problems);
  for (const w of res.hostWarnings) log.warn(w);
  return res.config;
}
