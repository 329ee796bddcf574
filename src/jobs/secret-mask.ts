/**
 * Masking of the values a run marks secret. Job output reaches the orchestrator as whole lines (the
 * agent joins the pieces a step writes until a newline), so masking line by line also catches a
 * value that a step printed in several writes. A value that spans lines is masked line by line.
 */

/** What a secret is replaced with in stored logs, live logs and API answers. */
export const SECRET_MASK = '***';

/**
 * Lines of a multi-line value shorter than this are not masked on their own: a lone "}" or "-----"
 * would blank out unrelated output and hide nothing worth hiding.
 */
const MIN_LINE_PART = 4;
/** The base64 form is masked too (a step that pipes a secret through `base64`), when it is this long. */
const MIN_BASE64_SOURCE = 6;

/**
 * The strings to mask for a set of secret values: each value, each longer line of a multi-line
 * value, and the base64 form of each; longest first, so a value that contains another is masked
 * whole rather than in part.
 */
export function maskPatterns(values: Iterable<string>): string[] {
  const out = new Set<string>();
  for (const raw of values) {
    const value = raw.replace(/\r?\n$/, '');
    if (!value) continue;
    const lines = value.split(/\r?\n/);
    if (lines.length === 1) out.add(value);
    else for (const l of lines) if (l.trim().length >= MIN_LINE_PART) out.add(l);
    if (value.length >= MIN_BASE64_SOURCE) out.add(Buffer.from(value).toString('base64'));
  }
  out.delete('');
  return [...out].sort((a, b) => b.length - a.length);
}

/** One line with every pattern replaced by the mask. */
export function maskLine(line: string, patterns: readonly string[]): string {
  let out = line;
  for (const p of patterns) if (out.includes(p)) out = out.split(p).join(SECRET_MASK);
  return out;
}

/** The values a job's spec marks secret: those of the named variables, in the job's and the steps' env. */
export function secretValues(spec: {
  secrets?: readonly string[] | undefined;
  env?: Record<string, string> | undefined;
  steps: readonly { env?: Record<string, string> | undefined }[];
}): string[] {
  const names = spec.secrets ?? [];
  if (!names.length) return [];
  const values: string[] = [];
  for (const env of [spec.env, ...spec.steps.map((s) => s.env)])
    for (const n of names) {
      const v = env?.[n];
      if (v !== undefined) values.push(v);
    }
  return values;
}
