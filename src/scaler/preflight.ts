import { access, constants, stat } from 'node:fs/promises';
import { join } from 'node:path';
import type { ScalerEntry } from '../config/index.js';
import { UserError } from '../util/errors.js';
import { toolSearchDirs } from '../util/system-tools.js';
import type { RequiredTool } from './types.js';

export interface ToolProblem {
  scaler: string;
  tool: string;
  problem: string;
  fix: string;
  severity: RequiredTool['severity'];
  /** The entry's field that names the tool, when one does. */
  field?: string;
}

/** Why `path` cannot be run, or undefined when it can (a directory passes an X_OK check, so it is tested first). */
export async function executableProblem(path: string): Promise<string | undefined> {
  try {
    if ((await stat(path)).isDirectory()) return `${path} is a directory, not an executable file`;
    await access(path, constants.X_OK);
    return undefined;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'ENOENT'
      ? `${path} does not exist`
      : `${path} is not an executable file`;
  }
}

/** The first executable `command` on PATH, then in the sbin directories PATH lacks; or undefined. */
export async function findOnPath(
  command: string,
  env: NodeJS.ProcessEnv = process.env,
): Promise<string | undefined> {
  for (const dir of toolSearchDirs(env)) {
    const candidate = join(dir, command);
    if ((await executableProblem(candidate)) === undefined) return candidate;
  }
  return undefined;
}

/** Check a scaler's required tools on this host; every missing one is reported, none thrown. */
export async function preflightTools(
  entry: Pick<ScalerEntry, 'name'>,
  tools: RequiredTool[],
  env: NodeJS.ProcessEnv = process.env,
): Promise<ToolProblem[]> {
  const problems: ToolProblem[] = [];
  for (const tool of tools) {
    const problem =
      tool.find.kind === 'path'
        ? await executableProblem(tool.find.path)
        : await commandProblem(tool.find.kind === 'command' ? [tool.find.command] : tool.find.commands, env);
    if (problem)
      problems.push({
        scaler: entry.name,
        tool: tool.name,
        problem,
        fix: tool.fix,
        severity: tool.severity,
        ...(tool.field ? { field: tool.field } : {}),
      });
  }
  return problems;
}

async function commandProblem(commands: string[], env: NodeJS.ProcessEnv): Promise<string | undefined> {
  for (const c of commands) if (await findOnPath(c, env)) return undefined;
  return `${commands.join(' or ')} was not found on PATH`;
}

export function describeToolProblem(p: ToolProblem): string {
  return `scaler "${p.scaler}": ${p.tool}: ${p.problem}. Fix: ${p.fix}`;
}

/** A UserError for the fatal problems (start-up stops, a reload is refused), or undefined when there are none. */
export function fatalToolError(problems: ToolProblem[]): UserError | undefined {
  const fatal = problems.filter((p) => p.severity === 'fatal').map(describeToolProblem);
  if (!fatal.length) return undefined;
  return new UserError(`missing host tools:\n  ${fatal.join('\n  ')}`, fatal);
}
