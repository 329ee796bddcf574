import { isAbsolute, resolve } from 'node:path';
import { normalizeLabelSet, type ScalerEntry } from '../../../config/index.js';
import type { RequiredTool } from '../../types.js';

/**
 * Bare-metal needs only the agent binary of each process-mode label set. A missing binary is a
 * `spawn`-severity problem, not a fatal one: start-up goes on and each spawn for that label set
 * fails with a classified reason (binary-missing / not-executable) and backs off, so the operator
 * sees it on the waiting job and in `diagnose` and can fix it without a restart.
 */
export function bareMetalTools(entry: ScalerEntry, baseDir: string): RequiredTool[] {
  return entry.labelSets.flatMap((ls) => {
    if (!ls.binaryPath) return [];
    const path = isAbsolute(ls.binaryPath) ? ls.binaryPath : resolve(baseDir, ls.binaryPath);
    return [
      {
        name: `agent binary of label set [${normalizeLabelSet(ls.labels)}]`,
        find: { kind: 'path', path },
        fix: `install kici-agent at ${path} (chmod +x), or point binaryPath at it`,
        severity: 'spawn',
      } satisfies RequiredTool,
    ];
  });
}
