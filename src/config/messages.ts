/**
 * Plain-language messages for zod's built-in issues, passed as the per-parse error map.
 * Messages a schema sets itself take precedence over these.
 */
import type { z } from 'zod';

type RawIssue = z.core.$ZodRawIssue;

const EXPECTED: Record<string, string> = {
  string: 'a string',
  number: 'a number',
  int: 'a whole number',
  boolean: 'true or false',
  array: 'a list',
  object: 'a mapping',
  record: 'a mapping',
  literal: 'a fixed value',
};

/** JSON-style quoting that also makes invisible characters (BOM, zero-width) visible. */
export function quote(text: string): string {
  return JSON.stringify(text).replace(
    /\p{C}/gu,
    (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`,
  );
}

/** How a YAML value reads to the operator who wrote it. */
export function describeValue(value: unknown): string {
  if (value === undefined) return 'nothing';
  if (value === null) return 'an empty value (null)';
  if (Array.isArray(value)) return 'a list';
  if (typeof value === 'object') return 'a mapping';
  if (typeof value === 'string') {
    const shown = value.length > 40 ? `${value.slice(0, 40)}…` : value;
    return `the string ${quote(shown)}`;
  }
  if (typeof value === 'number' && !Number.isFinite(value)) return `the number ${String(value)}`;
  if (typeof value === 'number' && !Number.isInteger(value)) return `the number ${value}`;
  return `${typeof value} ${String(value)}`;
}

/** Edit distance with early exit; only used on short key names. */
function distance(a: string, b: string): number {
  const row = Array.from({ length: b.length + 1 }, (_, i) => i);
  for (let i = 1; i <= a.length; i++) {
    let prev = row[0]!;
    row[0] = i;
    for (let j = 1; j <= b.length; j++) {
      const next = Math.min(row[j]! + 1, row[j - 1]! + 1, prev + (a[i - 1] === b[j - 1] ? 0 : 1));
      prev = row[j]!;
      row[j] = next;
    }
  }
  return row[b.length]!;
}

/** The closest known key to a typo, if it is plausibly what was meant. */
export function suggestKey(key: string, known: readonly string[]): string | undefined {
  let best: string | undefined;
  let bestScore = Infinity;
  for (const candidate of known) {
    const score = candidate.toLowerCase() === key.toLowerCase() ? 0 : distance(key, candidate);
    if (score < bestScore) {
      best = candidate;
      bestScore = score;
    }
  }
  return best !== undefined && bestScore <= Math.max(1, Math.floor(key.length / 4)) ? best : undefined;
}

function knownKeys(iss: RawIssue): string[] {
  const def = (iss.inst as { _zod?: { def?: { shape?: Record<string, unknown> } } } | undefined)?._zod?.def;
  return def?.shape ? Object.keys(def.shape) : [];
}

function unknownKeysMessage(iss: RawIssue & { keys: string[] }): string {
  const known = knownKeys(iss);
  let suggested = false;
  const parts = iss.keys.map((key) => {
    const hint = suggestKey(key, known);
    suggested ||= hint !== undefined;
    return hint ? `${quote(key)} (did you mean "${hint}"?)` : quote(key);
  });
  // The full list only helps when no single key was the obvious intent.
  const list = known.length > 0 && !suggested ? `; allowed here: ${known.join(', ')}` : '';
  return `unknown key${iss.keys.length > 1 ? 's' : ''} ${parts.join(', ')}${list}`;
}

function boundMessage(iss: RawIssue, kind: 'small' | 'big'): string | undefined {
  const i = iss as RawIssue & {
    origin?: string;
    minimum?: number | bigint;
    maximum?: number | bigint;
    inclusive?: boolean;
  };
  const bound = kind === 'small' ? i.minimum : i.maximum;
  const got = describeValue(iss.input);
  if (i.origin === 'number') {
    const op =
      kind === 'small' ? (i.inclusive ? 'at least' : 'greater than') : i.inclusive ? 'at most' : 'less than';
    return `must be ${op} ${String(bound)}, got ${got}`;
  }
  if (i.origin === 'array') {
    return kind === 'small'
      ? `needs at least ${String(bound)} item(s)`
      : `allows at most ${String(bound)} item(s)`;
  }
  if (i.origin === 'string') {
    if (kind === 'small' && Number(bound) === 1) return 'must not be empty';
    return `must be ${kind === 'small' ? 'at least' : 'at most'} ${String(bound)} characters`;
  }
  return undefined;
}

/** The per-parse error map: returns undefined to fall back to zod's own text. */
export function friendlyIssueMessage(iss: RawIssue): string | undefined {
  switch (iss.code) {
    case 'invalid_type': {
      const expected = EXPECTED[iss.expected] ?? iss.expected;
      if (iss.input === undefined) return `required: expected ${expected}`;
      const quoteHint =
        iss.expected === 'string' && (typeof iss.input === 'number' || typeof iss.input === 'boolean')
          ? ` (quote it in YAML: "${String(iss.input)}")`
          : '';
      return `expected ${expected}, got ${describeValue(iss.input)}${quoteHint}`;
    }
    case 'invalid_value': {
      const values = iss.values.map((v) => JSON.stringify(v));
      const want = values.length === 1 ? values[0] : `one of ${values.join(', ')}`;
      if (iss.input === undefined) return `required: expected ${want}`;
      return `expected ${want}, got ${describeValue(iss.input)}`;
    }
    case 'unrecognized_keys':
      return unknownKeysMessage(iss);
    case 'too_small':
      return boundMessage(iss, 'small');
    case 'too_big':
      return boundMessage(iss, 'big');
    case 'invalid_key': {
      const inner = (iss as RawIssue & { issues?: { message?: string }[] }).issues?.[0]?.message;
      return inner ?? `invalid key ${describeValue(iss.input)}`;
    }
    default:
      return undefined;
  }
}

/** Options for every parse of the scaler file, so all callers get the same messages. */
export const SCALER_PARSE_PARAMS = { error: friendlyIssueMessage } as const;
