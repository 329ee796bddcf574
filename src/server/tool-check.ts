import { access, constants, stat } from 'node:fs/promises';
import { dirname, isAbsolute, resolve } from 'node:path';
import type { ScalerEntry } from '../config/index.js';

/** A host tool a scaler needs to spawn anything: an agent binary, a container runtime, a VMM. */
export interface RequiredTool {
  tool: string;
  path: string;
  /** The label set that needs it, when only one does. */
  labelSet?: string[];
}

export type ToolProblem = 'missing' | 'not-executable' | 'directory';

/**
 * The tools an entry needs. A backend that declares its own (`getRequiredTools`, from the backend
 * port) is asked first; a bare-metal entry otherwise needs each label set's agent binary, resolved
 * against the config file's directory like the backend does.
 */
export function requiredToolsFor(
  entry: ScalerEntry,
  configPath: string | undefined,
  backend: unknown,
): RequiredTool[] {
  const declared = (backend as { getRequiredTools?: (e: ScalerEntry) => unknown } | undefined)
    ?.getRequiredTools;
  if (typeof declared === 'function') {
    const tools = declared.call(backend, entry);
    if (Array.isArray(tools)) return tools as RequiredTool[];
  }
  if (entry.type !== 'bare-metal') return [];
  const base = configPath ? dirname(configPath) : process.cwd();
  return entry.labelSets.flatMap((ls) =>
    ls.binaryPath
      ? [
          {
            tool: 'agent binary',
            path: isAbsolute(ls.binaryPath) ? ls.binaryPath : resolve(base, ls.binaryPath),
            labelSet: ls.labels,
          },
        ]
      : [],
  );
}

/** Why a tool cannot be run, or undefined when it can. */
export async function toolProblem(path: string): Promise<ToolProblem | undefined> {
  try {
    if ((await stat(path)).isDirectory()) return 'directory';
    await access(path, constants.X_OK);
    return undefined;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'ENOENT' ? 'missing' : 'not-executable';
  }
}
