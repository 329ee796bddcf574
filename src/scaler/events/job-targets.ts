import type { ScalerConfig } from '../../config/index.js';
import { checkRunFile } from '../../jobs/run-file.js';
import { errorMessage } from '../../util/errors.js';
import { readJobTarget } from './job-target.js';

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
      const file = target.slice('job:'.length).trim();
      let res = checked.get(file);
      if (!res) {
        // The same confined, size-capped read the router does at scale-up time.
        res = await readJobTarget(configPath, file).then(
          (read) => checkRunFile(read.path, read.text),
          (err: unknown) => ({ ok: false as const, kind: 'read' as const, problems: [errorMessage(err)] }),
        );
        checked.set(file, res);
      }
      if (res.ok) continue;
      const head = `scaler "${entry.name}": provisioningTargets[${i}] "${target}" is not a usable run file`;
      problems.push(...res.problems.map((p) => `${head}: ${p}`));
    }
  }
  return problems;
}
