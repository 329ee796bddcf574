import { dirname, isAbsolute, resolve } from 'node:path';
import type { ScalerConfig } from '../../config/index.js';
import { checkRunFile } from '../../jobs/run-file.js';

/** The file a `job:` target names: absolute, or relative to the main scaler config's directory. */
export function jobTargetPath(configPath: string, target: string): string {
  const file = target.slice('job:'.length).trim();
  return isAbsolute(file) ? file : resolve(dirname(configPath), file);
}

/**
 * Every `job:` provisioning target must be a run file that reads and validates now: a template that
 * cannot work is a configuration error, not a spawn failure to retry at the first scale-up. One
 * line per broken target, naming the scaler, the target, the file and what is wrong with it.
 */
export async function jobTargetProblems(config: ScalerConfig, configPath: string): Promise<string[]> {
  const problems: string[] = [];
  const checked = new Map<string, Awaited<ReturnType<typeof checkRunFile>>>();
  for (const entry of config.scalers) {
    const targets = entry.provisioningTargets ?? [];
    for (const [i, target] of targets.entries()) {
      if (!target.startsWith('job:')) continue;
      const path = jobTargetPath(configPath, target);
      let res = checked.get(path);
      if (!res) {
        res = await checkRunFile(path);
        checked.set(path, res);
      }
      if (res.ok) continue;
      const head = `scaler "${entry.name}": provisioningTargets[${i}] "${target}" is not a usable run file`;
      problems.push(...res.problems.map((p) => `${head}: ${p}`));
    }
  }
  return problems;
}
