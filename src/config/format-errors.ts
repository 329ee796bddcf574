/**
 * Config errors as lines a person can act on: each names the file, the YAML path in
 * `scalers[2].labelSets[0].image` form and what is expected. No stack traces.
 */
import { isNode, YAMLError } from 'yaml';
import { z } from 'zod';
import { UserError } from '../util/errors.js';
import { quote } from './messages.js';
import { errorOrigin, sourcesOf, type ConfigSources } from './provenance.js';

export type YamlPath = readonly PropertyKey[];

export interface ConfigErrorContext {
  /** The main config file, used when an error carries no file of its own. */
  configPath: string;
  /** Provenance from the loader; found on errors thrown by loadScalerConfig when omitted. */
  sources?: ConfigSources;
}

/** `['scalers', 2, 'labelSets', 0, 'image']` -> `scalers[2].labelSets[0].image`. */
export function formatYamlPath(path: YamlPath): string {
  let out = '';
  for (const key of path) {
    if (typeof key === 'number') out += `[${key}]`;
    else if (typeof key === 'string' && /^[A-Za-z_$][\w$]*$/.test(key)) out += out === '' ? key : `.${key}`;
    else out += `[${quote(String(key))}]`;
  }
  return out === '' ? '(top level)' : out;
}

export interface Location {
  file: string;
  path: PropertyKey[];
  line?: number;
}

/** Map a path in the merged document to the file that wrote it and the path within that file. */
export function locate(path: YamlPath, ctx: ConfigErrorContext, childKey?: string): Location {
  const sources = ctx.sources;
  let file = sources?.configPath ?? ctx.configPath;
  let local: PropertyKey[] = [...path];
  if (sources && path[0] === 'scalers' && typeof path[1] === 'number') {
    const origin = sources.origins[path[1]];
    if (origin) {
      file = origin.file;
      local = ['scalers', origin.localIndex, ...path.slice(2)];
    }
  }
  const line = sources
    ? lineOf(sources, file, childKey === undefined ? local : [...local, childKey])
    : undefined;
  return line === undefined ? { file, path: local } : { file, path: local, line };
}

/**
 * The line of the deepest node on `path` that exists in the file. The document root is
 * not used: "line 1" for a missing top-level key would point at nothing useful.
 */
function lineOf(sources: ConfigSources, file: string, path: PropertyKey[]): number | undefined {
  const source = sources.files.find((f) => f.file === file);
  if (!source) return undefined;
  for (let depth = path.length; depth >= 1; depth--) {
    try {
      const node: unknown = source.doc.getIn(path.slice(0, depth) as unknown[], true);
      if (isNode(node) && node.range) return source.lineCounter.linePos(node.range[0]).line;
    } catch {
      // A path through a scalar: try the parent.
    }
  }
  return undefined;
}

export function formatLocated(loc: Location, message: string): string {
  const line = loc.line === undefined ? '' : ` (line ${loc.line})`;
  return `${loc.file}: ${formatYamlPath(loc.path)}: ${message}${line}`;
}

export function formatZodIssues(error: z.ZodError, ctx: ConfigErrorContext): string[] {
  return error.issues.map((issue) => {
    const key = issue.code === 'unrecognized_keys' ? issue.keys[0] : undefined;
    return formatLocated(locate(issue.path, ctx, key), issue.message);
  });
}

/** First line of a yaml error without the position yaml appends (we print our own). */
function yamlMessage(err: YAMLError): string {
  const first = err.message.split('\n')[0] ?? err.message;
  return first.replace(/ at line \d+, column \d+:?/, '');
}

function formatYamlError(err: YAMLError, file: string): string {
  const pos = err.linePos?.[0];
  const where = pos ? `line ${pos.line}, column ${pos.col}` : 'YAML';
  return `${file}: ${where}: invalid YAML: ${yamlMessage(err)}`;
}

function formatFsError(err: NodeJS.ErrnoException, ctx: ConfigErrorContext): string | undefined {
  if (typeof err.code !== 'string' || !err.code.startsWith('E')) return undefined;
  const origin = errorOrigin(err);
  const path = origin?.path ?? err.path ?? ctx.configPath;
  const dir = origin?.kind === 'dir';
  switch (err.code) {
    case 'ENOENT':
      return `${path}: ${dir ? 'directory' : 'file'} not found`;
    case 'ENOTDIR':
      return dir ? `${path}: not a directory` : `${path}: file not found`;
    case 'EISDIR':
      return `${path}: is a directory, expected a YAML file`;
    case 'EACCES':
    case 'EPERM':
      return `${path}: permission denied`;
    default:
      return `${path}: cannot read (${err.code})`;
  }
}

/** Whether an error is about the operator's input (as opposed to a bug in this program). */
export function isConfigInputError(err: unknown): boolean {
  if (err instanceof z.ZodError || err instanceof YAMLError || err instanceof UserError) return true;
  const code = (err as NodeJS.ErrnoException | null)?.code;
  const tagged = errorOrigin(err) !== undefined || typeof (err as NodeJS.ErrnoException).path === 'string';
  return err instanceof Error && typeof code === 'string' && code.startsWith('E') && tagged;
}

/**
 * Lines for any error the config loader can throw: validation (ZodError), YAML syntax,
 * fs, or a UserError. Anything else becomes one line with its message, no stack.
 */
export function formatConfigError(err: unknown, ctx: ConfigErrorContext): string[] {
  const full: ConfigErrorContext = { ...ctx };
  const sources = ctx.sources ?? sourcesOf(err);
  if (sources) full.sources = sources;
  if (err instanceof z.ZodError) return formatZodIssues(err, full);
  if (err instanceof YAMLError) return [formatYamlError(err, errorOrigin(err)?.path ?? ctx.configPath)];
  if (err instanceof UserError) return err.problems.length > 0 ? err.problems : [err.message];
  if (err instanceof Error) {
    const fsLine = formatFsError(err, ctx);
    if (fsLine) return [fsLine];
    return [`${ctx.configPath}: ${err.message}`];
  }
  return [`${ctx.configPath}: ${String(err)}`];
}
