/**
 * Where a value or an error came from. The loader records it; the formatter reads it, so
 * an error thrown by `loadScalerConfig` can still be reported against the right file
 * (including a `scalers.d/` drop-in) by whoever catches it.
 */
import type { Document, LineCounter } from 'yaml';

/** One parsed YAML file. */
export interface SourceFile {
  file: string;
  doc: Document.Parsed;
  lineCounter: LineCounter;
  /** The document as plain data (null for an empty file). */
  value: unknown;
  dropIn: boolean;
  /** Parser warnings when the file was read on the fast path (then `doc` is built lazily). */
  fastWarnings?: string[];
}

/** Where merged `scalers[i]` was written: the file and its index within that file. */
export interface ScalerOrigin {
  file: string;
  localIndex: number;
}

export interface ConfigSources {
  configPath: string;
  scalersDir?: string;
  /** The main document with every drop-in's scalers appended. */
  merged: unknown;
  /** Indexed like merged `scalers`. */
  origins: ScalerOrigin[];
  files: SourceFile[];
  /** Read and parse errors of every file, in file order; each is tagged with its file. */
  failures: unknown[];
}

export interface ErrorOrigin {
  path: string;
  kind: 'file' | 'dir';
}

const errorOrigins = new WeakMap<object, ErrorOrigin>();
const errorSources = new WeakMap<object, ConfigSources>();

export function tagError<T>(err: T, origin: ErrorOrigin): T {
  if (typeof err === 'object' && err !== null) errorOrigins.set(err, origin);
  return err;
}

export function errorOrigin(err: unknown): ErrorOrigin | undefined {
  return typeof err === 'object' && err !== null ? errorOrigins.get(err) : undefined;
}

export function attachSources<T extends object>(err: T, sources: ConfigSources): T {
  errorSources.set(err, sources);
  return err;
}

export function sourcesOf(err: unknown): ConfigSources | undefined {
  return typeof err === 'object' && err !== null ? errorSources.get(err) : undefined;
}
