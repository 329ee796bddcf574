import { readFile } from 'node:fs/promises';
import { LineCounter, parseDocument } from 'yaml';
import { formatZodIssues } from '../config/format-errors.js';
import type { ConfigSources } from '../config/provenance.js';
import { UserError } from '../util/errors.js';
import { z } from 'zod';
import { capProblems, RUN_SPEC_PARSE_PARAMS, runSpecSchema, type RunSpec } from './run-spec.js';
import { dropShadowedRequired } from './run-spec-messages.js';
import { findUnsafeText } from './safe-text.js';

/** `read` and `syntax` failures are one line; `spec` failures list every problem. */
export type RunFileCheck =
  { ok: true; spec: RunSpec } | { ok: false; kind: 'read' | 'syntax' | 'spec'; problems: string[] };

/**
 * Check a run file (YAML or JSON) without a server. Problems read like the scaler config's: the file,
 * the YAML path, what is expected, "did you mean" for a mistyped key, and the line. The config's
 * document model and locator are reused, so both kinds of file report in the same words.
 */
export async function checkRunFile(path: string, given?: string): Promise<RunFileCheck> {
  let text: string;
  try {
    // A caller that had to check the file before reading it (a provisioning target) passes its text.
    text = given ?? (await readFile(path, 'utf8'));
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    const problem =
      code === 'ENOENT' ? `${path}: file not found` : `${path}: cannot read (${code ?? 'error'})`;
    return { ok: false, kind: 'read', problems: [problem] };
  }
  const lineCounter = new LineCounter();
  const doc = parseDocument(text, { lineCounter, prettyErrors: true });
  const syntax = doc.errors[0];
  if (syntax) {
    // Later syntax errors are nearly always echoes of the first one.
    const pos = syntax.linePos?.[0];
    const where = pos ? `:${pos.line}:${pos.col}` : '';
    return {
      ok: false,
      kind: 'syntax',
      problems: [`${path}${where}: not valid YAML or JSON: ${syntax.message.split('\n')[0]}`],
    };
  }
  let value: unknown;
  try {
    value = doc.toJS({ maxAliasCount: 100 });
  } catch (err) {
    // Unresolved aliases and alias bombs surface here, not as parse errors.
    return {
      ok: false,
      kind: 'syntax',
      problems: [`${path}: ${err instanceof Error ? err.message : String(err)}`],
    };
  }
  const unsafe = findUnsafeText(value);
  if (unsafe.length) return { ok: false, kind: 'spec', problems: unsafe.map((p) => `${path}: ${p}`) };
  const res = runSpecSchema.safeParse(value, RUN_SPEC_PARSE_PARAMS);
  if (res.success) return { ok: true, spec: res.data };
  const sources: ConfigSources = {
    configPath: path,
    merged: value,
    origins: [],
    files: [{ file: path, doc, lineCounter, value, dropIn: false }],
    failures: [],
  };
  const error = new z.ZodError(dropShadowedRequired(res.error.issues));
  return {
    ok: false,
    kind: 'spec',
    problems: capProblems(formatZodIssues(error, { configPath: path, sources })),
  };
}

/** Read a run file for submitting. Every problem names the file, the path inside it and the line. */
export async function readRunFile(path: string, given?: string): Promise<RunSpec> {
  const res = await checkRunFile(path, given);
  if (res.ok) return res.spec;
  if (res.kind !== 'spec') throw new UserError(res.problems[0]!);
  throw new UserError(`invalid run file:\n  ${res.problems.join('\n  ')}`, res.problems);
}

/** How much a valid run holds, for `job validate`'s one-line summary. */
export function summarizeRun(spec: RunSpec): { jobs: number; steps: number } {
  const jobs = Object.values(spec.jobs);
  return { jobs: jobs.length, steps: jobs.reduce((n, j) => n + j.steps.length, 0) };
}
