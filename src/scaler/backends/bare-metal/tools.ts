import { isAbsolute, resolve } from 'node:path';
import { normalizeLabelSet, type LabelSetConfig, type ScalerEntry } from '../../../config/index.js';
import type { RequiredTool } from '../../types.js';
import { forwardedAgentEnv } from './env.js';

/** Is the bubblewrap sandbox asked for, for this set (its own env) or for every set (forwarded env)? */
export function sandboxRequested(ls: LabelSetConfig, hostEnv: NodeJS.ProcessEnv): boolean {
  return ls.env?.KICI_SANDBOX === 'true' || forwardedAgentEnv(hostEnv).KICI_SANDBOX === 'true';
}

/**
 * What a bare-metal scaler needs on its host, all fatal: a scaler whose agents cannot start is a
 * config mistake the operator should see at start-up, not as a job that waits forever. A binary that
 * vanishes after start-up still fails each spawn with a classified reason (see launch-error.ts).
 * - every process-mode label set's `binaryPath` is an executable file;
 * - `node` is on PATH: the agent launcher is a node script and PATH is what the agent inherits;
 * - `bwrap` is on PATH when any set asks for the sandbox.
 */
export function bareMetalTools(
  entry: ScalerEntry,
  baseDir: string,
  hostEnv: NodeJS.ProcessEnv = process.env,
): RequiredTool[] {
  const tools: RequiredTool[] = entry.labelSets.flatMap((ls, i) => {
    if (!ls.binaryPath) return [];
    const path = isAbsolute(ls.binaryPath) ? ls.binaryPath : resolve(baseDir, ls.binaryPath);
    return [
      {
        name: `agent binary of label set [${normalizeLabelSet(ls.labels)}]`,
        find: { kind: 'path', path },
        fix: `install kici-agent at ${path} (chmod +x), or point binaryPath at it`,
        severity: 'fatal',
        field: `labelSets[${i}].binaryPath`,
      } satisfies RequiredTool,
    ];
  });
  if (entry.labelSets.some((ls) => ls.binaryPath)) {
    tools.push({
      name: 'node',
      find: { kind: 'command', command: 'node' },
      fix: 'install Node.js 24 and put node on the PATH the orchestrator runs with (agents inherit it)',
      severity: 'fatal',
    });
  }
  if (entry.labelSets.some((ls) => sandboxRequested(ls, hostEnv))) {
    tools.push({
      name: 'bwrap (KICI_SANDBOX=true)',
      find: { kind: 'command', command: 'bwrap' },
      fix: 'install bubblewrap (apt-get install bubblewrap), or drop KICI_SANDBOX',
      severity: 'fatal',
    });
  }
  return tools;
}
