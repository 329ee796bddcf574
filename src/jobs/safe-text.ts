/**
 * Text checks shared by the run spec, the run file and the HTTP API. PostgreSQL text and jsonb
 * cannot hold U+0000, and a lone UTF-16 surrogate cannot be encoded as UTF-8, so either one used
 * to fail deep in the store with a 500. They are refused up front instead, naming the field.
 */

/** A high surrogate not followed by a low one, or a low one not preceded by a high one. */
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
const LONE_SURROGATES = new RegExp(LONE_SURROGATE.source, 'g');

export function isWellFormedText(text: string): boolean {
  return !LONE_SURROGATE.test(text);
}

/** Lone surrogates become U+FFFD, the same repair UTF-8 encoders make. */
export function toWellFormedText(text: string): string {
  return isWellFormedText(text) ? text : text.replace(LONE_SURROGATES, '\uFFFD');
}

/** Longest piece of someone's input quoted back in a problem line. */
export const QUOTE_MAX = 100;

/** Shorten text quoted back to the sender, so a 1 MB name never comes back in full. */
export function clip(text: string, max = QUOTE_MAX): string {
  if (text.length <= max) return text;
  // Never cut a surrogate pair in half: the result must stay valid UTF-16.
  let end = max;
  const code = text.charCodeAt(end - 1);
  if (code >= 0xd800 && code <= 0xdbff) end -= 1;
  return `${text.slice(0, end)}…`;
}

/** A quoted, escaped and clipped rendering of untrusted text, safe to echo in a problem. */
export function quote(text: string, max = QUOTE_MAX): string {
  return JSON.stringify(toWellFormedText(clip(text, max)));
}

/** Why a string cannot be stored, or undefined when it can. */
export function textProblem(text: string): string | undefined {
  if (text.includes('\0')) return 'must not contain a NUL byte (U+0000)';
  if (!isWellFormedText(text)) return 'must not contain a lone UTF-16 surrogate (invalid Unicode)';
  return undefined;
}

/** Deeper input than this is refused before anything walks it recursively. */
export const MAX_DEPTH = 32;

type Segment = string | number;

function describePath(path: readonly Segment[]): string {
  let out = '';
  for (const part of path) {
    if (typeof part === 'number') out += `[${part}]`;
    else {
      const name = clip(part);
      out += out ? `.${name}` : name;
    }
  }
  return out || '(root)';
}

/**
 * Walk parsed JSON and report every string (keys included) that cannot be stored, and nesting
 * deeper than MAX_DEPTH. Iterative, so hostile nesting cannot overflow the stack.
 */
export function findUnsafeText(input: unknown, limit = 20): string[] {
  const problems: string[] = [];
  const stack: { value: unknown; path: Segment[] }[] = [{ value: input, path: [] }];
  while (stack.length && problems.length < limit) {
    const { value, path } = stack.pop()!;
    if (typeof value === 'string') {
      const p = textProblem(value);
      if (p) problems.push(`${describePath(path)}: ${p}`);
      continue;
    }
    if (value === null || typeof value !== 'object') continue;
    if (path.length >= MAX_DEPTH) {
      problems.push(`${describePath(path)}: nested more than ${MAX_DEPTH} levels deep`);
      continue;
    }
    if (Array.isArray(value)) {
      for (let i = value.length - 1; i >= 0; i--) stack.push({ value: value[i], path: [...path, i] });
      continue;
    }
    for (const [key, v] of Object.entries(value as Record<string, unknown>).reverse()) {
      const p = textProblem(key);
      if (p) problems.push(`${describePath(path)}: the key ${quote(key)} ${p}`);
      else stack.push({ value: v, path: [...path, key] });
    }
  }
  return problems;
}
