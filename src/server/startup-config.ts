import { loadScalerConfigForPeople, type ScalerConfig } from '../config/index.js';
import { jobTargetProblems } from '../scaler/events/job-targets.js';
import { checkScalerConfig } from '../scaler/startup-checks.js';
import { UserError } from '../util/errors.js';
import type { Logger } from '../util/logger.js';
import type { ClusterTiming } from './cluster-wiring.js';
import {
  clusterHeartbeatMs,
  clusterLockTimeoutMs,
  type OrchestratorOptions,
} from './orchestrator-options.js';
import { startupDiskGuard } from './startup-disk-guard.js';

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

/** Load and check the scaler config; every problem is listed, and nothing is thrown for bad input. */
export async function loadScalerConfigOrThrow(path: string, dir?: string): Promise<ScalerConfig> {
  const res = await loadScalerConfigForPeople(path, dir);
  const problems = res.ok ? await jobTargetProblems(res.config, path) : res.problems;
  if (!res.ok || problems.length)
    throw new UserError(`invalid scaler configuration:\n  ${problems.join('\n  ')}`, problems);
  return res.config;
}

/**
 * What start-up checks before it touches anything: the scaler config (with the same checks as
 * `kici-admin scaler validate`), the cluster timing, then the disk the scalers need.
 */
export async function startupChecks(
  opts: OrchestratorOptions,
  log: Logger,
): Promise<{ config: ScalerConfig | undefined; clusterTiming: ClusterTiming }> {
  const config = opts.scalerConfigPath ? await loadCheckedScalerConfig(opts, log) : undefined;
  // Checked before anything starts: a bad value is a UserError, not a half-started server.
  const clusterTiming = { heartbeatMs: clusterHeartbeatMs(opts), lockTimeoutMs: clusterLockTimeoutMs() };
  if (config)
    await startupDiskGuard(config, {
      configPath: opts.scalerConfigPath!,
      logger: log,
      ...opts.startupDiskGuard,
    });
  return { config, clusterTiming };
}
