import { readFile } from 'node:fs/promises';
import { parse as parseYaml, YAMLParseError } from 'yaml';
import { UserError } from '../util/errors.js';
import { parseRunSpec, type RunSpec } from './run-spec.js';

/** Read a run file (YAML or JSON). Every problem names the file and the path inside it. */
export async function readRunFile(path: string): Promise<RunSpec> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    throw new UserError(
      code === 'ENOENT' ? `${path}: file not found` : `${path}: cannot read (${code ?? 'error'})`,
    );
  }
  let doc: unknown;
  try {
    doc = parseYaml(text, { prettyErrors: true });
  } catch (err) {
    if (err instanceof YAMLParseError) {
      const pos = err.linePos?.[0];
      throw new UserError(
        `${path}${pos ? `:${pos.line}:${pos.col}` : ''}: not valid YAML or JSON: ${err.message.split('\n')[0]}`,
      );
    }
    throw err;
  }
  const parsed = parseRunSpec(doc);
  if (!parsed.ok) {
    const problems = parsed.problems.map((p) => `${path}: ${p}`);
    throw new UserError(`invalid run file:\n  ${problems.join('\n  ')}`, problems);
  }
  return parsed.value;
}
