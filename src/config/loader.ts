/**
 * Reading `scalers.yaml` and `scalers.d/`, merging, validating.
 */
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { LineCounter, parseDocument, type Document } from 'yaml';
import { fastParse } from './fast-yaml.js';
import { UserError } from '../util/errors.js';
import { SCALER_PARSE_PARAMS } from './messages.js';
import { fileSizeProblem, shapeProblem } from './size-caps.js';
import {
  attachSources,
  tagError,
  type ConfigSources,
  type ScalerOrigin,
  type SourceFile,
} from './provenance.js';
import { scalerFileSchema, type ScalerConfig } from './schema.js';

export function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function kindOf(value: unknown): string {
  if (Array.isArray(value)) return 'a list';
  return typeof value === 'string' ? 'a string' : `a ${typeof value}`;
}

type Parsed = { source: SourceFile } | { failures: unknown[] };

/** Parse one file; every problem comes back tagged with the file rather than thrown. */
async function readYamlFile(file: string, dropIn: boolean): Promise<Parsed> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (err) {
    return { failures: [tagError(err, { path: file, kind: 'file' })] };
  }
  const tooBig = fileSizeProblem(file, Buffer.byteLength(text, 'utf8'));
  if (tooBig) return { failures: [tagError(new UserError(tooBig), { path: file, kind: 'file' })] };
  const fast = fastParse(text, file);
  const shape = fast.ok ? shapeProblem(file, fast.value) : undefined;
  if (shape) return { failures: [tagError(new UserError(shape), { path: file, kind: 'file' })] };
  if (fast.ok) {
    if (dropIn && fast.value !== null && fast.value !== undefined && !isPlainObject(fast.value)) {
      const message = `${file}: the top level of a scalers.d file must be a mapping with a "scalers" list, got ${kindOf(fast.value)}`;
      return { failures: [tagError(new UserError(message), { path: file, kind: 'file' })] };
    }
    return { source: lazySource(file, text, fast.value ?? null, dropIn, fast.warnings) };
  }
  const lineCounter = new LineCounter();
  // Merge keys (`<<: *base`) are how operators share settings between scalers.
  const doc = parseDocument(text, { lineCounter, merge: true, prettyErrors: true });
  if (doc.errors.length > 0)
    return { failures: doc.errors.map((e) => tagError(e, { path: file, kind: 'file' })) };
  let value: unknown;
  try {
    value = doc.toJS({ maxAliasCount: 100 });
  } catch (err) {
    // Unresolved aliases and alias bombs surface here, not as parse errors.
    const message = err instanceof Error ? err.message : String(err);
    return { failures: [tagError(new UserError(`${file}: ${message}`), { path: file, kind: 'file' })] };
  }
  const slowShape = shapeProblem(file, value);
  if (slowShape) return { failures: [tagError(new UserError(slowShape), { path: file, kind: 'file' })] };
  if (dropIn && value !== null && !isPlainObject(value)) {
    const message = `${file}: the top level of a scalers.d file must be a mapping with a "scalers" list, got ${kindOf(value)}`;
    return { failures: [tagError(new UserError(message), { path: file, kind: 'file' })] };
  }
  return { source: { file, doc, lineCounter, value, dropIn } };
}

/** A parsed file whose full document model (for line numbers) is built only if someone asks. */
function lazySource(
  file: string,
  text: string,
  value: unknown,
  dropIn: boolean,
  warnings: string[],
): SourceFile {
  let model: { doc: Document.Parsed; lineCounter: LineCounter } | undefined;
  const build = () => {
    if (!model) {
      const lineCounter = new LineCounter();
      model = { doc: parseDocument(text, { lineCounter, merge: true }), lineCounter };
    }
    return model;
  };
  return {
    file,
    value,
    dropIn,
    fastWarnings: warnings,
    get doc() {
      return build().doc;
    },
    get lineCounter() {
      return build().lineCounter;
    },
  };
}

/** `*.yaml` / `*.yml` entries of the drop-in directory in code-unit order. */
async function listDropIns(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { withFileTypes: true });
  return entries
    .filter((e) => (e.isFile() || e.isSymbolicLink()) && /\.ya?ml$/.test(e.name))
    .map((e) => e.name)
    .sort()
    .map((name) => join(dir, name));
}

/**
 * Read every file and merge drop-in scalers into the main document, collecting (not
 * throwing) read and parse failures so a caller can report all of them.
 */
export async function readConfigSources(configPath: string, scalersDirPath?: string): Promise<ConfigSources> {
  const sources: ConfigSources = { configPath, merged: undefined, origins: [], files: [], failures: [] };
  if (scalersDirPath !== undefined) sources.scalersDir = scalersDirPath;

  let dropInPaths: string[] = [];
  if (scalersDirPath !== undefined) {
    try {
      dropInPaths = await listDropIns(scalersDirPath);
    } catch (err) {
      sources.failures.push(tagError(err, { path: scalersDirPath, kind: 'dir' }));
    }
  }
  const parsed = await Promise.all([
    readYamlFile(configPath, false),
    ...dropInPaths.map((file) => readYamlFile(file, true)),
  ]);
  // The main file's failures come first whatever order the reads finished in.
  for (const result of parsed) {
    if ('failures' in result) sources.failures.push(...result.failures);
    else sources.files.push(result.source);
  }
  const main = sources.files.find((f) => !f.dropIn);
  if (!main) return sources;
  sources.merged = main.value;
  if (!isPlainObject(main.value)) return sources;

  // Merge into copies so each file's own value stays as written (warnings read it).
  const doc: Record<string, unknown> = { ...main.value };
  const origins: ScalerOrigin[] = [];
  if (Array.isArray(doc.scalers)) {
    doc.scalers = [...(doc.scalers as unknown[])];
    (doc.scalers as unknown[]).forEach((_, i) => origins.push({ file: main.file, localIndex: i }));
  }
  for (const dropIn of sources.files.filter((f) => f.dropIn)) {
    if (!isPlainObject(dropIn.value) || !Array.isArray(dropIn.value.scalers)) continue;
    if (doc.scalers === undefined || doc.scalers === null) doc.scalers = [];
    // A main `scalers` of the wrong type stays as written so the schema reports it.
    if (!Array.isArray(doc.scalers)) break;
    const target = doc.scalers as unknown[];
    dropIn.value.scalers.forEach((item, i) => {
      target.push(item);
      origins.push({ file: dropIn.file, localIndex: i });
    });
  }
  sources.merged = doc;
  sources.origins = origins;
  return sources;
}

/**
 * Load the main YAML config, append the `scalers` arrays of every `*.yaml` /
 * `*.yml` in `scalersDirPath` (alphabetical order), and validate the result.
 *
 * @throws ZodError if validation fails (formatConfigError turns it into lines naming the
 *   file, drop-ins included); the underlying fs or YAML error for an unreadable or
 *   malformed file; a UserError for a drop-in whose top level is not a mapping.
 */
export async function loadScalerConfig(configPath: string, scalersDirPath?: string): Promise<ScalerConfig> {
  const sources = await readConfigSources(configPath, scalersDirPath);
  if (sources.failures.length > 0) throw sources.failures[0];
  const result = scalerFileSchema.safeParse(sources.merged, SCALER_PARSE_PARAMS);
  if (!result.success) throw attachSources(result.error, sources);
  return result.data;
}
